"""The slices behind rule windows: what a cycle folds again and what it keeps."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection, transaction

from controlplane.alerts import evaluate
from controlplane.alerts.shards import WHOLE
from controlplane.alerts.windows import ensure_partitions
from controlplane.alerts.windows.schema import SLICES
from tests.support.alert_data import T0, rule, samples

S = timedelta(seconds=1)


def run_queries(rules, now):
    """One lane's cycle over the whole fleet, in a transaction of its own."""
    ensure_partitions([WHOLE])
    with transaction.atomic():
        return evaluate.run_queries(rules, now)


def slice_versions(since, until) -> dict:
    """The row version (xmin) of each GPU slice in [since, until): a slice folded again is a
    new row version."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT gpu_id, ts, xmin::text FROM {SLICES['gpu'].name} "
                       f"WHERE ts >= %s AND ts < %s", [since, until])
        return {(gpu, ts): xmin for gpu, ts, xmin in cursor.fetchall()}


def test_a_longer_window_adds_the_older_slices_and_keeps_the_others(node):
    gpu = node.gpus[0]
    samples("gpu", {"gpu_id": gpu.id},
            lambda ts: {"temp_c": 95.0 if ts <= T0 - 200 * S else 40.0}, T0 - 400 * S,
            T0 + 60 * S)
    short = rule(metric="gpu.temp_c", aggregation="max", window_s=60, op=">", threshold=90)
    assert run_queries([short], T0)[short.id] == []
    kept = slice_versions(T0 - 50 * S, T0 - 20 * S)
    assert kept

    long = rule(metric="gpu.temp_c", aggregation="max", window_s=300, op=">", threshold=90)
    hits = run_queries([short, long], T0 + 10 * S)

    # the 95 °C rows of T0-290 s … T0-200 s were folded for the new window
    assert [(h.gpu_id, h.value) for h in hits[long.id]] == [(gpu.id, 95.0)]
    # and the slices the shorter window had built were kept, not folded again
    assert slice_versions(T0 - 50 * S, T0 - 20 * S) == kept
