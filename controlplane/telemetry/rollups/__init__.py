"""Rollups at 1 minute and 1 hour: schema (schema.py), the statements that build them (sql.py),
the incremental refresh the Celery task runs (refresh.py), and the ingest hook that marks
buckets late samples reached (late.py). docs/history.md tells the whole story."""

from controlplane.telemetry.rollups.refresh import catch_up, read_watermark, run
from controlplane.telemetry.rollups.schema import TABLES, TIERS, RollupTable, Tier

__all__ = ["TABLES", "TIERS", "RollupTable", "Tier", "catch_up", "read_watermark", "run"]
