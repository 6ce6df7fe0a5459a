"""What the series layer refuses: each error names the request parameter at fault."""

from __future__ import annotations


class SeriesError(ValueError):
    """A query the layer refuses; ``param`` names the request parameter at fault."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class EntityNotFound(SeriesError):
    """No entity of the metric's kind has that name."""
