"""The first slice of a window is looked up by primary key, whatever the statistics say.

Steady cycles append slices in time order, and the table's statistics end a little before the
newest ones. A plain ``ts >= start`` then looks, to the planner, like a condition almost no row
meets, so it walked the ``ts`` index and filtered every slice since the start for each target:
one GPU query took 6.4 s at fleet scale (BENCHMARKS.md §7). This builds that situation at a
smaller scale and reads the plan.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import connection, transaction

from controlplane.alerts.queries import entity_query
from controlplane.alerts.rules import rule_metric
from controlplane.alerts.shards import WHOLE
from controlplane.alerts.windows import ensure_partitions
from controlplane.alerts.windows.schema import SLICE_S, SLICES
from controlplane.fleet.models import Gpu, Host
from tests.support.alert_data import T0, rule

GPUS = 2000
SLICES_ANALYZED = 60  # what the statistics know
SLICES_SINCE = 6  # appended after the last ANALYZE, as steady cycles do


def _append_slices(first: int, count: int) -> None:
    """Slices ``first`` … ``first - count + 1`` before T0 of every GPU, in time order."""
    table = SLICES["gpu"].name
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (shard, gpu_id, ts, n, t0, t1, temp_c_n, temp_c_first, "
            f"temp_c_last) SELECT {WHOLE.code}, g.id, s.ts, 10, s.ts + interval '1 s', "
            f"s.ts + interval '10 s', 10, 50, 50 FROM generate_series(%s::timestamptz, "
            f"%s::timestamptz, interval '{SLICE_S} s') AS s(ts), fleet_gpu g ORDER BY s.ts, g.id",
            [T0 - timedelta(seconds=SLICE_S * first),
             T0 - timedelta(seconds=SLICE_S * (first - count + 1))])


def test_the_first_slice_of_a_window_is_read_by_primary_key(empty_samples):
    host = Host.objects.create(hostname="plan-host")
    Gpu.objects.bulk_create(Gpu(host=host, index=i, uuid=f"GPU-plan-{i}") for i in range(GPUS))
    ensure_partitions([WHOLE])
    _append_slices(SLICES_ANALYZED + SLICES_SINCE, SLICES_ANALYZED)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {SLICES['gpu'].name}")
    _append_slices(SLICES_SINCE, SLICES_SINCE)
    r = rule(metric="gpu.temp_c", aggregation="rate", window_s=30, op=">", threshold=1)
    sql, params = entity_query("gpu", [(r, rule_metric(r))], T0, WHOLE)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_memoize = off")  # as the cycle runs it
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    lookups = [line for line in plan.splitlines() if "Index Scan" in line]
    assert lookups, plan
    assert all("_pkey" in line for line in lookups), plan
