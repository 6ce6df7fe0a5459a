"""Telemetry bookkeeping models. The sample tables themselves are raw SQL: see schema.py."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from controlplane.fleet.models import Host


class AgentStream(models.Model):
    """One agent boot's stream of batches: the highest seq stored makes replays idempotent.

    The ingest writer locks these rows inside its flush transaction (writer.py), so two
    concurrent copies of one batch cannot both be stored.
    """

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="streams")
    boot_id = models.UUIDField()
    max_seq = models.BigIntegerField(default=0)
    agent_version = models.CharField(max_length=50, blank=True)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["host", "boot_id"], name="agent_stream_unique")
        ]

    def __str__(self) -> str:
        return f"{self.host_id}/{self.boot_id} up to seq {self.max_seq}"


class HistogramLayout(models.Model):
    """A set of histogram bucket bounds; sample rows store counts and this id."""

    id = models.SmallAutoField(primary_key=True)
    bounds = ArrayField(models.FloatField(), unique=True)

    def __str__(self) -> str:
        return f"layout {self.id}: {len(self.bounds)} bounds"


class HostHistogramLayout(models.Model):
    """A histogram layout a host has sent. Ingest counts these to cap the distinct layouts each
    host may register (``MAX_HISTOGRAM_LAYOUTS_PER_HOST``): layout ids are 16-bit and every
    reader loads the layout table, so one agent token must not be able to fill it."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="+")
    layout = models.ForeignKey(HistogramLayout, on_delete=models.CASCADE, related_name="+")
    first_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["host", "layout"], name="host_layout_unique")
        ]

    def __str__(self) -> str:
        return f"host {self.host_id} uses layout {self.layout_id}"


class RollupWatermark(models.Model):
    """How far a rollup tier is built: every bucket before ``upto`` is in its tables.

    Later buckets are read from the finer tier by the series layer; late samples before it
    are caught by ``RollupDirty`` (rollups/refresh.py).
    """

    resolution = models.CharField(max_length=8, primary_key=True)  # "1m", "1h"
    upto = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.resolution} built up to {self.upto.isoformat()}"


class RollupDirty(models.Model):
    """A bucket of one host whose rollup must be recomputed: samples reached it late.

    The ingest writer inserts ("1m", host, minute) rows in its flush transaction for samples
    whose minute may already be rolled up (rollups/late.py); the rollup task deletes them as
    it claims them, recomputes those minutes and marks their hour ("1h", host, hour).
    """

    pk = models.CompositePrimaryKey("resolution", "host_id", "bucket")
    resolution = models.CharField(max_length=8)
    host_id = models.IntegerField()  # no foreign key: a deleted host's rows just roll up nothing
    bucket = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.resolution} of host {self.host_id} at {self.bucket.isoformat()}"


class PackProgress(models.Model):
    """How far the packing job has packed one raw table's day (packing/job.py): every row
    before ``upto`` is in the packed table; ``sealed`` once the day's raw partition was
    emptied (TRUNCATE) after that."""

    pk = models.CompositePrimaryKey("table_name", "day")
    table_name = models.CharField(max_length=63)
    day = models.DateField()
    upto = models.DateTimeField()
    sealed = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.table_name} {self.day.isoformat()} packed up to {self.upto.isoformat()}"


class PackDirty(models.Model):
    """A minute of one host that samples reached after its day was sealed or being packed.

    The ingest writer inserts these in its flush transaction (rollups/late.py) for samples
    older than the packing read horizon; the packing job claims them, merges those minutes'
    raw rows into the packed table and empties the raw partition again (packing/job.py).
    """

    pk = models.CompositePrimaryKey("host_id", "bucket")
    host_id = models.IntegerField()  # no foreign key, as RollupDirty
    bucket = models.DateTimeField()

    def __str__(self) -> str:
        return f"host {self.host_id} at {self.bucket.isoformat()} to pack"
