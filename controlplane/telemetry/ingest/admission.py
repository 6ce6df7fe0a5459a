"""Who may hold an ingest request open, and how many: so one agent token cannot shut the others
out with requests whose bodies never arrive.

Three counts, each checked before the work it bounds:
- ``reading``: requests whose bodies are arriving (INGEST_MAX_BODIES_READING). A body costs
  nothing until its bytes come, and at most INGEST_BODY_TIMEOUT_S (body.py).
- per host: requests of one host, reading or handled (INGEST_MAX_REQUESTS_PER_HOST), counted
  once its token is known and before its body is read. An agent sends one request at a time.
- ``in_flight`` (app.py): requests whose bodies have arrived, being parsed and written
  (INGEST_MAX_REQUESTS_IN_FLIGHT): the CPU and memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from controlplane.telemetry.ingest.errors import BadRequest


class TooManyForHost(BadRequest):
    """429: this host already has as many requests open as it may (a retry later is fine)."""

    reason = "too_many_requests"


class Admission:
    def __init__(self, max_per_host: int, max_reading: int) -> None:
        self.max_per_host = max_per_host
        self.max_reading = max_reading
        self.per_host: dict[int, int] = {}
        self.reading = 0

    def host_full(self, host_id: int) -> bool:
        return self.per_host.get(host_id, 0) >= self.max_per_host

    def reading_full(self) -> bool:
        return self.reading >= self.max_reading

    @contextmanager
    def host(self, host_id: int) -> Iterator[None]:
        """Holds one of the host's places for the request's whole life after its token."""
        if self.host_full(host_id):
            raise TooManyForHost(
                f"this host already has {self.max_per_host} requests in progress "
                "(INGEST_MAX_REQUESTS_PER_HOST); send one at a time", status=429)
        self.per_host[host_id] = self.per_host.get(host_id, 0) + 1
        try:
            yield
        finally:
            left = self.per_host[host_id] - 1
            if left:
                self.per_host[host_id] = left
            else:
                del self.per_host[host_id]  # the dict holds busy hosts only

    @contextmanager
    def body(self) -> Iterator[None]:
        """Holds a reading place while the body arrives (the caller checked reading_full)."""
        self.reading += 1
        try:
            yield
        finally:
            self.reading -= 1
