"""Primary key order of the GPU sample table: load speed against one GPU's range reads.

    python -m tests.bench.pk_order [--gpus 1000] [--seconds 600]

Loads the same rows (binary COPY, 8,000 rows a transaction, as the ingest writer does under
load) into two daily-partitioned tables that differ only in their primary key, then reads one
GPU's last hour from each. The first design measured the write side (docs/architecture.md);
this adds the read side.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import psycopg

from controlplane.telemetry.ingest.copy import UnixSecondsDumper, _UnixSeconds
from tests.bench import harness

COLUMNS = "gpu_id int4 NOT NULL, ts timestamptz NOT NULL, util_pct float4, mem_used_bytes int8,"\
          " temp_c float4, power_w float4, sm_clock_mhz float4, pcie_tx_bps float8"


def setup(conn, name: str, pk: str, day: str, next_day: str) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {name}")
    conn.execute(f"CREATE TABLE {name} ({COLUMNS}, PRIMARY KEY ({pk})) PARTITION BY RANGE (ts)")
    conn.execute(f"CREATE INDEX ON {name} USING brin (ts)")
    conn.execute(f"CREATE TABLE {name}_p PARTITION OF {name} FOR VALUES FROM ('{day}') "
                 f"TO ('{next_day}')")


def load(conn, name: str, gpus: int, seconds: int, start: float) -> dict:
    pg = harness.CpuMeter(harness.postgres_processes)
    pg.start()
    wall = time.monotonic()
    rows = 0
    batch: list[tuple] = []
    for second in range(seconds):
        ts = start + second
        for gpu in range(gpus):
            batch.append((gpu, ts, 97.0, 7 * 2**33, 65.0, 600.0, 1980.0, 1.2e9))
            if len(batch) == 8000:
                rows += _copy(conn, name, batch)
                batch = []
    rows += _copy(conn, name, batch)
    elapsed = time.monotonic() - wall
    return {"rows": rows, "rows_per_s": round(rows / elapsed), "postgres_cpu_s_per_100k_rows":
            round(pg.stop() / rows * 1e5, 3)}


def _copy(conn, name: str, batch: list[tuple]) -> int:
    if not batch:
        return 0
    with conn.transaction(), conn.cursor() as cur, cur.copy(
            f"COPY {name} FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "timestamptz", "float4", "int8", "float4", "float4", "float4",
                        "float8"])
        for row in batch:
            copy.write_row(row)
    return len(batch)


def read(conn, name: str, gpus: int, start: float, seconds: int) -> dict:
    conn.execute(f"VACUUM ANALYZE {name}")
    times = []
    for _ in range(100):
        gpu = random.randrange(gpus)
        since = start + seconds - 3600
        began = time.perf_counter()
        conn.execute(f"SELECT ts, util_pct FROM {name} WHERE gpu_id = %s AND ts >= "
                     "to_timestamp(%s) ORDER BY ts", (gpu, since)).fetchall()
        times.append((time.perf_counter() - began) * 1000)
    plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) SELECT ts, util_pct FROM {name} WHERE "
                        "gpu_id = 1 AND ts >= to_timestamp(%s) ORDER BY ts",
                        (start + seconds - 3600,)).fetchall()
    buffers = next((line for (line,) in plan if "Buffers" in line), "").strip()
    return {"one_gpu_last_hour_ms_p50": round(statistics.median(times), 2),
            "one_gpu_last_hour_ms_p95": round(sorted(times)[94], 2), "buffers": buffers}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=600)
    args = parser.parse_args(argv)
    # A database of its own: these tables need no migrations, and other benchmarks may be
    # using pitwall_bench.
    with psycopg.connect("host=127.0.0.1 dbname=postgres", autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS pitwall_bench_pk WITH (FORCE)")
        admin.execute("CREATE DATABASE pitwall_bench_pk")
    dsn = "host=127.0.0.1 dbname=pitwall_bench_pk"
    start = float(int(time.time()) // 86400 * 86400 + 3600)
    day = time.strftime("%Y-%m-%d", time.gmtime(start))
    next_day = time.strftime("%Y-%m-%d", time.gmtime(start + 86400))
    report = {"machine": harness.machine(), "gpus": args.gpus, "seconds": args.seconds}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.adapters.register_dumper(_UnixSeconds, UnixSecondsDumper)
        for name, pk in (("pk_gpu_first", "gpu_id, ts"), ("pk_ts_first", "ts, gpu_id")):
            setup(conn, name, pk, day, next_day)
            report[name] = {**load(conn, name, args.gpus, args.seconds, start),
                            **read(conn, name, args.gpus, start, args.seconds)}
            conn.execute(f"DROP TABLE {name}")
    print(json.dumps(report, indent=2))
    out = harness.ROOT / "var" / "bench" / "pk_order.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
