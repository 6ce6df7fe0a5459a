"""The one error type of the ingest path: a refusal that names the field."""

from __future__ import annotations

# A refusal's reason, as /metrics counts it (a few values: never the field, which is unbounded).
REASONS = {401: "unauthorized", 403: "unauthorized", 408: "timeout", 413: "too_large",
           415: "unsupported_media_type", 429: "too_many_requests"}


class BadRequest(Exception):
    reason = ""  # a subclass may name its own

    def __init__(self, message: str, field: str = "", status: int = 400,
                 reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status
        self.reason = reason or self.reason or REASONS.get(status, "invalid")


def join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
