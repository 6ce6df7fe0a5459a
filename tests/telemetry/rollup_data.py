"""A known synthetic history in the raw tables, and the rollups computed from it in Python.

Two hours and a minute from D0 (a midnight, so the rollup task has no empty stretch to walk)
at one row every 5 s for one host, its GPU, its engine and one process, written with plain
INSERTs. Values are chosen so the interesting cases happen: temp_c missing from the last row
of every minute (so "last" must look further back), a bitmask and a sparse error code, CPU
core arrays, and histogram rows in a second layout during one minute.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection

from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.telemetry import partitions
from controlplane.telemetry.models import HistogramLayout, RollupWatermark
from controlplane.telemetry.schema import TABLES

D0 = datetime(2026, 3, 3, tzinfo=UTC)
STEP = timedelta(seconds=5)
ROWS = 12 * 121  # two hours and one minute
BOUNDS = [0.1, 0.5, 1.0]
OTHER_BOUNDS = [1.0]
OTHER_LAYOUT_MINUTE = 7  # in this minute some engine rows use OTHER_BOUNDS


@dataclass
class History:
    host: Host
    gpu: Gpu
    engine: Engine
    pid: int
    layout: int
    other_layout: int


def make_fleet(hostname: str = "gpu-node-1") -> tuple[Host, Gpu, Engine]:
    host = Host.objects.create(hostname=hostname)
    gpu = Gpu.objects.create(host=host, uuid=f"GPU-{hostname}-0", index=0)
    engine = Engine.objects.create(host=host, name="vllm:8000/0")
    return host, gpu, engine


def insert_rows(entity: str, rows: list[dict]) -> None:
    """Plain INSERTs, many rows per statement; each row maps column names to values."""
    table = TABLES[entity].name
    with connection.cursor() as cursor:
        partitions.ensure(cursor, {row["ts"].astimezone(UTC).date() for row in rows})
        by_columns: dict[tuple, list[dict]] = defaultdict(list)
        for row in rows:
            by_columns[tuple(row)].append(row)
        for columns, group in by_columns.items():
            marks = ", ".join(["%s"] * len(columns))
            cursor.executemany(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",
                [list(r.values()) for r in group])


def write_history(seed: int = 7) -> History:
    rng = random.Random(seed)
    host, gpu, engine = make_fleet()
    lay = HistogramLayout.objects.get_or_create(bounds=BOUNDS)[0].id
    other = HistogramLayout.objects.get_or_create(bounds=OTHER_BOUNDS)[0].id
    gpus, hosts, engines, procs = [], [], [], []
    for i in range(ROWS):
        ts = D0 + i * STEP
        minute = i // 12
        gpus.append({
            "gpu_id": gpu.id, "ts": ts,
            "util_pct": rng.randint(0, 400) / 4,
            "mem_used_bytes": rng.randint(0, 2**36),
            "temp_c": None if i % 12 == 11 else rng.randint(100, 180) / 2,
            "throttle_reasons": rng.choice([0, 1, 4, 5, 64]),
            "xid_last": {3: 13, 500: 79, 501: 31}.get(i),
        })
        hosts.append({"host_id": host.id, "ts": ts, "cpu_pct": rng.randint(0, 200) / 2,
                      "cpu_core_pct": [rng.randint(0, 200) / 2 for _ in range(4)]})
        other_layout = minute == OTHER_LAYOUT_MINUTE and i % 12 < 3
        engines.append({
            "engine_id": engine.id, "ts": ts, "up": 1,
            "kv_cache_usage": rng.randint(0, 64) / 64,
            "ttft_seconds_layout": other if other_layout else lay,
            "ttft_seconds_counts": ([rng.randint(0, 2), 0] if other_layout
                                    else [rng.randint(0, 9) for _ in range(4)]),
            "ttft_seconds_sum": rng.randint(0, 100) / 8,
        })
        procs.append({"host_id": host.id, "pid": 4242, "ts": ts,
                      "engine_id": engine.id if minute < 100 else None,
                      "cpu_pct": rng.randint(0, 800) / 4})
    for entity, rows in (("gpu", gpus), ("host", hosts), ("engine", engines), ("proc", procs)):
        insert_rows(entity, rows)
    return History(host, gpu, engine, 4242, lay, other)


def start_rollups_at(ts: datetime) -> None:
    """As if the rollup task had run up to ``ts`` (hour-aligned) before the data came."""
    for tier in ("1m", "1h"):
        RollupWatermark.objects.update_or_create(resolution=tier, defaults={"upto": ts})


def fetch(sql: str, params=()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def raw_rows(entity: str, columns: str, where: str = "TRUE", params=()) -> list[tuple]:
    """(ts, *columns) of a raw table, in time order."""
    return fetch(f"SELECT ts, {columns} FROM {TABLES[entity].name} WHERE {where} ORDER BY ts",
                 params)


def bucket_of(ts: datetime, seconds: int) -> datetime:
    return datetime.fromtimestamp(ts.timestamp() // seconds * seconds, UTC)


def by_bucket(rows: list[tuple], seconds: int) -> dict[datetime, list[tuple]]:
    out: dict[datetime, list[tuple]] = defaultdict(list)
    for row in rows:
        out[bucket_of(row[0], seconds)].append(row)
    return dict(out)


def stats(values: list, bitmask: bool = False) -> dict:
    """min, max, avg, last of a bucket's values, absent ones (None) left out."""
    present = [v for v in values if v is not None]
    if not present:
        return {"min": None, "max": None, "avg": None, "last": None}
    if bitmask:
        low = high = present[0]
        for v in present:
            low, high = low & v, high | v
        return {"min": low, "max": high, "last": present[-1]}
    return {"min": min(present), "max": max(present), "avg": sum(present) / len(present),
            "last": present[-1]}


def elementwise(arrays: list[list[float]]) -> dict:
    columns = list(zip(*arrays, strict=True))
    per = [stats(list(c)) for c in columns]
    return {s: [p[s] for p in per] for s in ("min", "max", "avg", "last")}


def summed_histogram(rows: list[tuple]) -> tuple[int, list[int], float]:
    """(layout, counts, sum) of rows (ts, layout, counts, sum): the layout holding the most
    observations keeps the bucket."""
    per: dict[int, tuple[list[int], float]] = {}
    for _, lay, counts, total in rows:
        have, s = per.get(lay, ([0] * len(counts), 0.0))
        per[lay] = ([a + b for a, b in zip(have, counts, strict=True)], s + (total or 0.0))
    lay = max(per, key=lambda k: (sum(per[k][0]), k))
    return lay, per[lay][0], per[lay][1]
