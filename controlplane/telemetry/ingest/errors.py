"""The one error type of the ingest path: a refusal that names the field."""

from __future__ import annotations


class BadRequest(Exception):
    def __init__(self, message: str, field: str = "", status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status


def join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
