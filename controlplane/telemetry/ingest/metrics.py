"""The ingest path's own metrics (``/metrics``, docs/prometheus.md).

Counted per request and per flush, never per value: at 1,000 batches/s a counter update in
multiprocess mode (a write to a memory-mapped file) is the unit of cost, and the benchmark
(BENCHMARKS.md) keeps the whole at a small share of the ingest CPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from controlplane.telemetry.schema import TABLES

if TYPE_CHECKING:  # rows.py loads models: this module stays importable without Django
    from controlplane.telemetry.ingest.rows import Rows

REQUESTS = Counter(
    "pitwall_ingest_requests", "Ingest requests answered, by outcome "
    "(ok, refused: 4xx, unavailable: 503)", ["outcome"])
BATCHES = Counter(
    "pitwall_ingest_batches", "Agent batches, by outcome (stored; duplicate: a replay already "
    "stored; refused; unavailable: not stored, the agent retries)", ["outcome"])
REFUSED = Counter(
    "pitwall_ingest_refused_batches", "Batches refused, by reason (invalid, clock, retention, "
    "unauthorized, too_large, unsupported_media_type)", ["reason"])
ROWS = Counter("pitwall_ingest_rows", "Sample rows stored, by entity", ["entity"])
VALUES = Counter(
    "pitwall_ingest_values", "Values stored: the present value columns of the rows (a "
    "histogram is three: its layout, counts and sum)")
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
_KEY_WIDTH = {t.name: len(t.keys) + 1 for t in TABLES.values()}  # the keys and ts


def count_stored(rows: Iterable[Rows]) -> None:
    """Rows and values of one flush's stored batches, counted once per table."""
    per_table: dict[str, tuple[int, int]] = {}
    for batch_rows in rows:
        for table, table_rows in batch_rows.items():
            if table_rows:
                n, present = per_table.get(table, (0, 0))
                # Values: the row's columns after the keys and ts, less the absent (None) ones.
                width = len(table_rows[0]) - _KEY_WIDTH[table]
                present += width * len(table_rows) - sum(r.count(None) for r in table_rows)
                per_table[table] = (n + len(table_rows), present)
    for table, (n, present) in per_table.items():
        _ROWS_OF[table].inc(n)
        VALUES.inc(present)
