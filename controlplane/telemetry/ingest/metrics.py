"""The ingest path's own metrics (``/metrics``, docs/prometheus.md).

Counted per request and per flush, never per row or value: at 1,000 batches/s a counter
update in multiprocess mode (a write to a memory-mapped file, ~1 µs) is the unit of cost;
values are counted a column at a time where COPY transposes the rows anyway (copy.py).
``make bench-selfmetrics`` sets the whole against the ingest server's CPU (BENCHMARKS.md).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from controlplane.telemetry.schema import TABLES

REQUESTS = Counter(
    "pitwall_ingest_requests", "Ingest requests answered, by outcome "
    "(ok, refused: 4xx, unavailable: 503)", ["outcome"])
BATCHES = Counter(
    "pitwall_ingest_batches", "Agent batches, by outcome (stored; duplicate: a replay already "
    "stored; refused; unavailable: not stored, the agent retries)", ["outcome"])
REFUSED = Counter(
    "pitwall_ingest_refused_batches", "Batches refused, by reason (invalid, clock, retention, "
    "unauthorized, too_large, unsupported_media_type, timeout: the body did not arrive in "
    "time, too_many_requests: the host had too many in progress)", ["reason"])
ROWS = Counter("pitwall_ingest_rows", "Sample rows stored, by entity", ["entity"])
VALUES = Counter(
    "pitwall_ingest_values", "Values stored: the present value columns of the rows (a "
    "histogram is three: its layout, counts and sum)")
SHED = Counter(
    "pitwall_ingest_shed_requests", "Requests answered 503 at once, before their body was parsed "
    "(also counted as unavailable requests), by reason: queue (more than "
    "INGEST_MAX_QUEUED_ROWS rows wait for the writer), requests (INGEST_MAX_REQUESTS_IN_FLIGHT "
    "in progress), reading (INGEST_MAX_BODIES_READING bodies arriving), stalled (the database "
    "stopped answering)", ["reason"])
SPOOL_REPLAYS = Counter(
    "pitwall_ingest_spool_replays", "Requests that replayed several batches from an agent's "
    "spool")
QUEUE = Gauge(
    "pitwall_ingest_writer_queue_batches", "Batches waiting for the writer's next flush",
    multiprocess_mode="livesum")
FLUSH_SECONDS = Histogram(
    "pitwall_ingest_flush_seconds", "One flush of the writer: the batches' COPY and commit",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))

# Counter children resolved once: .labels() looks a child up by its label values.
REQUESTS_OK = REQUESTS.labels("ok")
REQUESTS_REFUSED = REQUESTS.labels("refused")
REQUESTS_UNAVAILABLE = REQUESTS.labels("unavailable")
BATCHES_STORED = BATCHES.labels("stored")
BATCHES_DUPLICATE = BATCHES.labels("duplicate")
BATCHES_REFUSED = BATCHES.labels("refused")
BATCHES_UNAVAILABLE = BATCHES.labels("unavailable")
_ROWS_OF = {t.name: ROWS.labels(t.entity) for t in TABLES.values()}


def count_answered(new: list[bool]) -> None:
    """A request answered 200: per batch, stored (True) or a replay already stored (False)."""
    duplicates = new.count(False)
    REQUESTS_OK.inc()
    BATCHES_STORED.inc(len(new) - duplicates)
    if duplicates:
        BATCHES_DUPLICATE.inc(duplicates)
    if len(new) > 1:
        SPOOL_REPLAYS.inc()


def count_refused(reason: str, batches: int) -> None:
    REQUESTS_REFUSED.inc()
    BATCHES_REFUSED.inc(batches)
    REFUSED.labels(reason).inc(batches)


def count_unavailable(batches: int) -> None:
    REQUESTS_UNAVAILABLE.inc()
    BATCHES_UNAVAILABLE.inc(batches)


def count_shed(reason: str) -> None:
    """A request shed at the door: its batches are unknown (the body was never read)."""
    REQUESTS_UNAVAILABLE.inc()
    SHED.labels(reason).inc()


def count_stored(stored: dict[str, tuple[int, int]]) -> None:
    """One committed flush: table -> (rows, values) it stored (copy.copy_rows counts them)."""
    for table, (rows, values) in stored.items():
        _ROWS_OF[table].inc(rows)
        VALUES.inc(values)
