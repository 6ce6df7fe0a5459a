"""Efficiency benchmark: the 30-day report (docs/efficiency.md) over 2,000 engines.

    make bench-efficiency                          # 1,000 hosts x 8 GPUs, 2 engines of 4 GPUs
    python -m tests.bench.efficiency --reuse       # the last run's fleet and rows
    python -m tests.bench.efficiency --hosts 100 --repeat 3   # a quicker look

Load: a fresh bench database; ``--hosts`` hosts of 8 GPUs, each serving two vLLM engines of
4 GPUs, created through the ORM in bulk. The rows a 30-day report reads, ending at ``end``
(the minute before now, plus 30 s) as the rollup task leaves them:

- the 1-hour rollups of every hour of the 30 days, built by PostgreSQL itself: one day of
  rows from the generators of history_data.py (every column the fleet reports; each GPU's
  energy counter rising at its power), then copied to the other days with their timestamps
  moved (``INSERT … SELECT``, no expression evaluated again);
- the 1-minute rollups of the hour the range starts in and of the hour it ends in, up to the
  1-minute watermark (the minute before ``end``'s);
- raw rows (history_data.py, binary COPY) for the seconds at either edge;
- the tiers' watermarks where the rollup task would have them.

Then, in this process, ``report(range, end)`` end to end for 30 d, 7 d and 24 h, ``--repeat``
times each after one warm-up: wall time, this process's CPU, and the CPU of the bench
database's PostgreSQL backends (with their parallel workers). Twice: first from the hourly
rows (the 1-day tier not built yet), then after the rollup task's own code (``advance`` of the
"1d" tier) built the 1-day rollups from them, timed with its CPU (a day at a time, as the
task builds each new day once). With ``--reuse`` the days are there: only the second. Last,
every statement of one 30-day report with ``EXPLAIN (ANALYZE, BUFFERS)``: its time and the
nodes of its plan.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil

from tests.bench import harness, history_data
from tests.bench.export_prometheus import PostgresCpu, create_fleet, explain
from tests.bench.history import relay

GPUS_PER_HOST, ENGINES_PER_HOST = 8, 2
MODELS = ("meta-llama/Llama-3.1-70B-Instruct", "Qwen/Qwen3-32B", "mistralai/Mistral-Large")
RANGES = ("30d", "7d", "24h")
TARGET_S = 1.0
HOUR, DAY = 3600, 86400
# Joules a second the energy counters rise by: a GPU near its mean draw.
WATTS = 420.0


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5, help="reports per range")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the bench database's fleet and rows (skip the load)")
    parser.add_argument("--out", type=Path,
                        default=harness.ROOT / "var" / "bench" / "efficiency.json")
    return parser.parse_args(argv)


# -- load -------------------------------------------------------------------------------------

def entities(fleet: dict) -> dict[str, list[tuple]]:
    """(key, host index, entity index, x) per entity, as history_data.rows_sql takes them."""
    return {
        "gpu": [(g, i // GPUS_PER_HOST, i % GPUS_PER_HOST, 0)
                for i, g in enumerate(fleet["gpus"])],
        "engine": [(e, i // ENGINES_PER_HOST, i % ENGINES_PER_HOST, fleet["layout"])
                   for i, e in enumerate(fleet["engines"])],
    }


def _stat_expr(entity: str, column, width: int) -> str:
    """One rollup column of a bucket ``width`` seconds wide starting at second ``s``."""
    source = column.source.name
    if column.stat == "counts":  # a bucket sums ``width`` seconds of per-second counts
        return (f"ARRAY(SELECT (CASE WHEN b BETWEEN 3 AND 9 THEN round(random() * L * 4 * "
                f"{width}) ELSE 0 END) FROM generate_series(1, {history_data.BUCKETS + 1}) b)")
    if source == "energy_j":  # joules since the driver loaded, rising at WATTS
        first = f"(s - 1700000000) * {WATTS}"
        return {"min": first, "max": f"{first} + {WATTS * (width - 1)}",
                "avg": f"{first} + {WATTS * (width - 1) / 2}",
                "last": f"{first} + {WATTS * (width - 1)}"}[column.stat]
    if column.stat == "sum":
        return f"(random() * L * 10 * {width})"
    expr = history_data.GENERATORS[entity].get(source)
    return "NULL" if expr is None else expr


def rollup_sql(tier: str, entity: str, ents: list[tuple], lo: int, hi: int) -> str:
    """``INSERT`` the rows of ``tier`` for buckets starting in ``[lo, hi)`` (unix seconds)."""
    from controlplane.telemetry.rollups.schema import TABLES

    table = TABLES[tier][entity]
    width = table.tier.seconds
    key = table.keys[0].name
    values = [f"({_stat_expr(entity, c, width)})::{c.sql_type}" for c in table.columns]
    rows = ", ".join(f"({', '.join(str(v) for v in e)})" for e in ents)
    return (f"INSERT INTO {table.name} ({key}, ts, n, {', '.join(c.name for c in table.columns)})"
            f" SELECT e.k, to_timestamp(s), {width}, {', '.join(values)} "
            f"FROM generate_series({lo}::int8, {hi - 1}::int8, {width}) AS s "
            f"CROSS JOIN LATERAL (SELECT e.*, {history_data.LOAD} AS L FROM (VALUES {rows}) "
            f"AS e(k, h, g, x)) e")


def copy_days_sql(entity: str, first: int, days: int) -> str:
    """Copy the 1-hour rows of the day starting at ``first`` to the ``days`` days after it."""
    from controlplane.telemetry.rollups.schema import TABLES

    table = TABLES["1h"][entity]
    key = table.keys[0].name
    names = ", ".join(c.name for c in table.columns)
    return (f"INSERT INTO {table.name} ({key}, ts, n, {names}) "
            f"SELECT t.{key}, t.ts + make_interval(days => d), t.n, {names} "
            f"FROM {table.name} t CROSS JOIN generate_series(1, {days}) d "
            f"WHERE t.ts >= to_timestamp({first}) AND t.ts < to_timestamp({first + DAY})")


def timeline(now: float) -> dict[str, int]:
    """Where each tier's rows start and stop (unix seconds) for a 30-day report ending at
    ``end``: 30 s past the minute, so both edges have raw seconds."""
    end = int(now) - int(now) % 60 - 60 + 30
    start = end - 30 * DAY
    minute_mark = end - end % 60 - 60  # the 1-minute tier's watermark
    hour_mark = minute_mark - minute_mark % HOUR  # the 1-hour tier's
    first_hour = start - start % HOUR
    return {"start": start, "end": end, "minute_mark": minute_mark, "hour_mark": hour_mark,
            "first_hour": first_hour}


def load(fleet: dict, dsn: str, when: dict[str, int]) -> dict:
    from django.db import connection, transaction

    from controlplane.telemetry import partitions
    from controlplane.telemetry.rollups.schema import TABLES

    ents = entities(fleet)
    first, last = (datetime.fromtimestamp(when[k], UTC).date() for k in ("first_hour", "end"))
    days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
    # The edges' days, and the days beside them an edge may reach into.
    edges = sorted({d + timedelta(days=n) for d in (first, last) for n in (-1, 0, 1)})
    with transaction.atomic(), connection.cursor() as cursor:
        partitions.ensure(cursor, edges)
        for tier, period in (("1m", "day"), ("1h", "month")):
            names = [TABLES[tier][e].name for e in ents]
            partitions.ensure(cursor, edges if tier == "1m" else days, names, period)
        cursor.execute("DELETE FROM telemetry_rollupwatermark")
        cursor.execute("INSERT INTO telemetry_rollupwatermark (resolution, upto) VALUES "
                       "('1m', to_timestamp(%s)), ('1h', to_timestamp(%s))",
                       [when["minute_mark"], when["hour_mark"]])
    hours = (when["hour_mark"] - when["first_hour"]) // HOUR
    whole_days, rest = divmod(hours, 24)
    start_hour_end = when["first_hour"] + HOUR
    end_hour = when["minute_mark"] - when["minute_mark"] % HOUR
    statements = {e: [rollup_sql("1h", e, v, when["first_hour"], when["first_hour"] + DAY),
                      copy_days_sql(e, when["first_hour"], whole_days - 1),
                      rollup_sql("1h", e, v, when["first_hour"] + whole_days * DAY,
                                 when["first_hour"] + whole_days * DAY + rest * HOUR),
                      rollup_sql("1m", e, v, when["first_hour"], start_hour_end),
                      rollup_sql("1m", e, v, end_hour, when["minute_mark"])]
                  for e, v in ents.items()}
    raw = [(e, history_data.rows_sql(e, v, lo, hi, "realistic")) for e, v in ents.items()
           for lo, hi in ((when["start"] - 10, when["start"] + 40),
                          (when["minute_mark"] - 10, when["end"] + 10))]
    began = time.monotonic()

    def run(sqls: list[str]) -> None:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            for sql in sqls:
                conn.execute(sql)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(run, statements.values()))
        moved = sum(pool.map(lambda job: relay(dsn, *job), raw))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return {"wall_s": round(time.monotonic() - began, 1), "raw_copy_mb": round(moved / 2**20),
            "hourly_rows": {e: len(v) * hours for e, v in ents.items()}}


def stored_timeline() -> dict[str, int] | None:
    """The timeline of the rows loaded before (``--reuse``), from the watermarks."""
    from controlplane.telemetry.series.plan import watermarks

    marks = watermarks()
    if "1m" not in marks:
        return None
    minute_mark = int(marks["1m"].timestamp())
    end = minute_mark + 90
    return {"start": end - 30 * DAY, "end": end, "minute_mark": minute_mark,
            "hour_mark": int(marks["1h"].timestamp()),
            "first_hour": end - 30 * DAY - (end - 30 * DAY) % HOUR}


def build_days() -> dict:
    """The 1-day rollups of every whole day the hourly rows hold, by the rollup task's code."""
    from django.db import connection

    from controlplane.telemetry.rollups import refresh
    from controlplane.telemetry.rollups.schema import TABLES, TIERS

    meter = PostgresCpu()
    meter.start()
    t0, c0 = time.perf_counter(), time.thread_time()
    days = refresh.advance(TIERS["1d"], datetime.now(UTC), None)
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    pg = meter.stop()
    # In service the days a report reads were written days before, and autovacuum has
    # analyzed them since (the planner's estimates for the day reads): as here.
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {', '.join(t.name for t in TABLES['1d'].values())}")
    return {"days": days, "wall_s": round(wall, 1), "python_cpu_s": round(cpu, 2),
            "postgres_cpu_s": round(pg, 1), "wall_s_per_day": round(wall / max(1, days), 2)}


def days_built() -> bool:
    from controlplane.telemetry.rollups import read_watermark
    from controlplane.telemetry.rollups.schema import TIERS

    return read_watermark(TIERS["1d"]) is not None


# -- measure ----------------------------------------------------------------------------------

def measure(range_name: str, end: datetime, repeat: int) -> dict:
    from django.conf import settings

    from controlplane.telemetry.efficiency import report
    from controlplane.telemetry.series.timeouts import QueryTimeout

    limit = settings.PITWALL["QUERY_TIMEOUT_S"]
    cold = None
    try:
        t0 = time.perf_counter()
        made = report(range_name, end)  # warm: imports, plans, the buffer cache
        cold = round(time.perf_counter() - t0, 3)
    except QueryTimeout:
        cold = f"over the {limit}-s query timeout"
    # Measured whatever it takes: the figures say how far over the timeout a read is.
    settings.PITWALL["QUERY_TIMEOUT_S"] = 600
    try:
        made = report(range_name, end)
        walls, cpus, pgs = _runs(report, range_name, end, repeat)
    finally:
        settings.PITWALL["QUERY_TIMEOUT_S"] = limit
    return {"range": range_name, "engines": len(made.engines), "models": len(made.models),
            "resolution": made.resolution,
            "stretches": [f"{s.resolution} {s.lo:%m-%d %H:%M:%S}-{s.hi:%m-%d %H:%M:%S}"
                          for s in made.stretches],
            "first_s": cold, "over_timeout": sum(w > limit for w in walls),
            "wall_s_p50": round(statistics.median(walls), 3), "wall_s_max": round(max(walls), 3),
            "python_cpu_s": round(statistics.median(cpus), 3),
            "postgres_cpu_s": round(statistics.median(pgs), 3), "n": repeat}


def _runs(report, range_name: str, end: datetime, repeat: int):
    walls, cpus, pgs = [], [], []
    for _ in range(repeat):
        meter = ReportCpu()
        meter.start()
        # The process's CPU (the report reads the GPUs on a thread of its own) less the
        # meter's own thread, which polls PostgreSQL's processes meanwhile.
        t0, c0 = time.perf_counter(), time.process_time()
        report(range_name, end)
        walls.append(time.perf_counter() - t0)
        c1 = time.process_time()
        pgs.append(meter.stop())
        cpus.append(c1 - c0 - meter.own_cpu)
    return walls, cpus, pgs


class ReportCpu(PostgresCpu):
    """PostgresCpu, and the bench database's backends that connect while it runs (the
    report's second connection, closed after) with their parallel workers, each counted up
    to its last reading; ``own_cpu``: this meter's polling thread's CPU."""

    own_cpu = 0.0

    def _run(self) -> None:
        started, workers = time.thread_time(), {}
        while not self.stopping.wait(self.every):
            for child in self.postmaster.children():
                if child.pid not in self.leaders and child.pid not in workers:
                    self._adopt(child, workers)
            for pid, proc in list(workers.items()):
                cpu = self._cpu(proc)
                if cpu is None:
                    del workers[pid]
                else:
                    self.last_cpu[pid] = cpu
        self.own_cpu = time.thread_time() - started

    def _adopt(self, child: psutil.Process, workers: dict) -> None:
        with suppress(psutil.Error):
            title = " ".join(child.cmdline())
            leader = title.rpartition("parallel worker for PID ")[2].strip()
            ours = leader.isdigit() and (int(leader) in self.leaders or int(leader) in workers)
            if ours or f" {harness.BENCH_DB} " in title:
                workers[child.pid] = child
                self.start_cpu.setdefault(child.pid, 0.0)


def measure_ranges(end: datetime, repeat: int) -> list[dict]:
    results = []
    for name in RANGES:
        results.append(measure(name, end, repeat))
        print(f"  {results[-1]}", flush=True)
    return results


def statements(end: datetime) -> list[tuple[str, list]]:
    from django.db import connection, transaction

    from controlplane.telemetry.efficiency import report

    seen: list[tuple[str, list]] = []

    def record(execute, sql, params, many, context):
        seen.append((sql, params))
        return execute(sql, params, many, context)

    # In a transaction the report reads on this connection alone: outside one, the GPUs'
    # statements would run on a second connection this wrapper does not see.
    with transaction.atomic(), connection.execute_wrapper(record):
        report("30d", end)
    return [(sql, params) for sql, params in seen if "set_config" not in sql
            and not sql.lstrip().upper().startswith(("SAVEPOINT", "RELEASE"))]


def main(argv=None) -> int:
    args = parse_args(argv)
    harness.open_bench_database(reuse=args.reuse)
    from django.db import connection

    from controlplane.fleet.models import Engine, Gpu, Host
    from controlplane.telemetry.ingest.copy import dsn_from_settings

    report: dict = {"machine": harness.machine(), "when": datetime.now(UTC).isoformat(),
                    "loadavg_before": os.getloadavg(),
                    "args": {k: str(v) for k, v in vars(args).items()}}
    when = stored_timeline() if args.reuse and Host.objects.exists() else None
    if when is None:
        print(f"creating {args.hosts} hosts, {args.hosts * GPUS_PER_HOST} GPUs, "
              f"{args.hosts * ENGINES_PER_HOST} engines ...", flush=True)
        fleet = create_fleet(args.hosts, ENGINES_PER_HOST, MODELS, deployments=False)
        when = timeline(time.time())
        print("loading 30 days of 1-hour rollups, the edges' 1-minute and raw rows ...",
              flush=True)
        report["load"] = load(fleet, dsn_from_settings(connection.settings_dict), when)
        print(f"  {report['load']}", flush=True)
    else:
        report["load"] = "reused"
    end = datetime.fromtimestamp(when["end"], UTC)
    # Present and seen: the report lists them.
    Engine.objects.update(present=True, last_seen=end)
    report["fleet"] = {"hosts": Host.objects.count(), "gpus": Gpu.objects.count(),
                       "engines": Engine.objects.count()}
    print(f"fleet: {report['fleet']}; end {end.isoformat()}", flush=True)
    report["reports"] = []
    if not days_built():
        print("reports from the hourly rows:", flush=True)
        report["hourly"] = measure_ranges(end, args.repeat)
        print("building the 1-day rollups ...", flush=True)
        report["build_days"] = build_days()
        print(f"  {report['build_days']}", flush=True)
    print("reports with the 1-day rollups:", flush=True)
    report["reports"] = measure_ranges(end, args.repeat)
    # What a request without ``end`` gets while the rollup task keeps up (default_end).
    built = datetime.fromtimestamp(when["hour_mark"], UTC)
    print(f"ending where the 1-hour rollups do ({built.isoformat()}), the default end:",
          flush=True)
    report["rollup_end"] = measure_ranges(built, args.repeat)
    for label, at in (("end", end), ("rollup_end", built)):
        print(f"statements of one 30-day report ending at {at.isoformat()}:", flush=True)
        report[f"statements_{label}"] = [explain(sql, params, jit=False)
                                          for sql, params in statements(at)]
        for item in report[f"statements_{label}"]:
            print(f"  {item['ms']:>8} ms  {item['rows']} rows  {item['nodes']}\n"
                  f"             {item['sql']}", flush=True)
    report["loadavg_after"] = os.getloadavg()
    print(f"machine: {report['machine']}; load average before {report['loadavg_before']}, "
          f"after {report['loadavg_after']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    for label, key in (("ending at a given second", "reports"),
                       ("ending where the 1-hour rollups do", "rollup_end")):
        whole = report[key][0]
        print(f"target at {whole['engines']} engines, {label}: 30-day report p50 "
              f"{whole['wall_s_p50']} s, max {whole['wall_s_max']} s (< {TARGET_S}): "
              f"{'met' if whole['wall_s_max'] < TARGET_S else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
