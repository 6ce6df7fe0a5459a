"""Stack cost: CPU and memory of every process of `make run` while 1,000 agents x 8 GPUs report.

    make bench-stack         # 1,000 agents x 8 GPUs at 1 Hz: 600 s warm-up, then a 60-s window
    python -m tests.bench.stack_cost --warmup 60 --duration 60  # a quick look: windows not full

Starts what `make run` starts (``manage.py runstack``: the ASGI server, the Celery worker with
the default alert pack, beat) without its simulated fleet (``--sim-hosts 0``), on the bench
database and a Redis DB number of its own; registers real agent tokens; drives the ingest with
the load generator (tests/bench/loadgen.py) in a process of its own; after a warm-up samples
every process of the stack, PostgreSQL and Redis with psutil (how each is attributed:
tests/bench/stack_sampler.py). Prints a table and the bill per 1,000 GPU hosts, PostgreSQL's
disk growth per hour, and the alert cycle time the Celery worker logs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.bench import autovacuum, harness, loadgen
from tests.bench.stack_sampler import Sampler

OUT_DIR = harness.ROOT / "var" / "bench"
GRACE_S = 30.0  # after the window, for the last answers
TASK_DONE = re.compile(r"Task ([\w.]+)\[[^\]]+\] succeeded in ([\d.]+)s: (.*)")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between batches")
    parser.add_argument("--warmup", type=float, default=600.0,
                        help="seconds of load before the window: the default pack's longest "
                             "window is 600 s, and a cycle's cost grows while they fill")
    parser.add_argument("--duration", type=float, default=60.0, help="sampled seconds")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--port", type=int, default=18790)
    parser.add_argument("--redis-db", type=int, default=13,
                        help="this bench's own Redis DB number (flushed before and after)")
    parser.add_argument("--web-workers", type=int, default=None,
                        help="uvicorn workers (default: runstack's, i.e. make run's)")
    parser.add_argument("--vacuum-every", type=float, default=60.0,
                        help="when the server runs with autovacuum off: vacuum what "
                             "autovacuum would, this often (tests/bench/autovacuum.py); 0: never")
    parser.add_argument("--out", type=Path, default=OUT_DIR / "stack_cost.json")
    parser.add_argument("--loadgen-child", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# -- the load generator's process ------------------------------------------------------------

async def drive(args) -> dict:
    """Register every agent, say when the window is, drive until its end, report."""
    issued = json.loads(args.loadgen_child.read_text())
    agents = [loadgen.Agent(hostname, token, args.gpus) for hostname, token in issued]
    await loadgen.register(agents, args.port)
    measure_from = time.monotonic() + args.warmup
    until = measure_from + args.duration
    # CLOCK_MONOTONIC is system-wide: the parent samples over the same instants.
    print(json.dumps({"measure_from": measure_from, "until": until}), flush=True)
    results = loadgen.Results()
    tasks = [asyncio.create_task(keep_sending(a, args, until, measure_from, results))
             for a in agents]
    # Each agent waits for its answer before it sends again (loadgen.run_agent), so when the
    # server falls behind, agents fall behind their schedule and go on sending the window's
    # batches after it: stop GRACE_S after the window, and say how many were still at it.
    _, pending = await asyncio.wait(tasks, timeout=until - time.monotonic() + GRACE_S)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    lat = results.latencies
    return {"batches_ok": results.ok, "errors": results.errors,
            "agents_behind_schedule_at_end": len(pending),
            "latency_ms": {q: round(harness.percentile(lat, p) * 1000, 1)
                           for q, p in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))}}


async def keep_sending(agent, args, until: float, measure_from: float, results) -> None:
    """One agent until the window ends, whatever befalls its connection: a connection the
    server closed between two batches (its keep-alive timeout, when this process is starved of
    CPU for seconds) ends loadgen.run_agent with an exception; count it and go on."""
    while time.monotonic() < until:
        try:
            await loadgen.run_agent(agent, args.port, args.interval, until, measure_from,
                                    results)
        except (IndexError, ValueError, ConnectionError) as exc:
            if time.monotonic() >= measure_from:
                results.error(f"connection lost ({type(exc).__name__})")


def loadgen_main(args) -> int:
    report = asyncio.run(drive(args))
    print(json.dumps(report), flush=True)
    return 0


# -- the stack -------------------------------------------------------------------------------

def prepare(args) -> tuple[dict, Path]:
    """Fresh bench database, agent tokens in a file (mode 600), our Redis DB emptied."""
    import redis

    env = harness.open_bench_database()
    from django.db import connections

    from tests.bench.ingest import create_tokens

    issued = create_tokens(args.agents)
    connections.close_all()  # no backend of ours left on the stack's database
    tokens = OUT_DIR / "stack_cost_tokens.json"
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    tokens.touch(mode=0o600)
    tokens.write_text(json.dumps(issued))
    env["REDIS_URL"] = f"redis://127.0.0.1:6379/{args.redis_db}"
    env["PYTHONUNBUFFERED"] = "1"  # the worker's task lines reach the log as they happen
    stale = redis.Redis.from_url(env["REDIS_URL"]).dbsize()
    if stale:
        print(f"Redis DB {args.redis_db} held {stale} keys (a previous run's?): flushed")
    redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    return env, tokens


def start_stack(args, env: dict, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "manage.py", "runstack", "--sim-hosts", "0", "--port",
            str(args.port), "--celery-loglevel", "info"]
    if args.web_workers:
        argv += ["--web-workers", str(args.web_workers)]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=harness.ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    harness.wait_for_url(f"http://127.0.0.1:{args.port}/healthz", proc, timeout=120)
    return proc


def stop_stack(proc: subprocess.Popen) -> None:
    """SIGTERM to runstack stops its children; any that outlive it are ours to stop."""
    try:
        ours = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        ours = []
    harness.stop_process(proc, timeout=60)
    for child in ours:
        with contextlib.suppress(psutil.Error):  # gone with runstack, as it should be
            child.send_signal(signal.SIGTERM)


def start_loadgen(args, env: dict, tokens: Path) -> tuple[subprocess.Popen, dict]:
    argv = [sys.executable, "-m", "tests.bench.stack_cost", "--loadgen-child", str(tokens),
            "--port", str(args.port), "--gpus", str(args.gpus), "--interval",
            str(args.interval), "--warmup", str(args.warmup), "--duration", str(args.duration)]
    proc = subprocess.Popen(argv, cwd=harness.ROOT, env=env, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("the load generator exited before registering its agents")
    return proc, json.loads(line)


# -- PostgreSQL: sizes and rows --------------------------------------------------------------

SIZES_SQL = """
SELECT coalesce(pg_partition_root(c.oid), c.oid)::regclass::text,
       sum(pg_total_relation_size(c.oid))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg_toast%'
GROUP BY 1
"""


def db_state(conn, dbname: str) -> dict:
    """Table sizes (partitions summed into their root, indexes and TOAST included), the
    database's size, and the GPU sample rows."""
    from controlplane.telemetry.schema import TABLES

    at = time.monotonic()  # the count's snapshot is taken as it starts: it may take seconds
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {TABLES['gpu'].name}")
        gpu_rows = cur.fetchone()[0]
        cur.execute(SIZES_SQL)
        tables = {name: int(size) for name, size in cur.fetchall()}
        cur.execute("SELECT pg_database_size(%s)", (dbname,))
        total = cur.fetchone()[0]
    return {"tables": tables, "database": total, "gpu_rows": gpu_rows, "at": at}


def disk_growth(before: dict, after: dict) -> dict:
    hours = (after["at"] - before["at"]) / 3600
    grew = {name: after["tables"][name] - before["tables"].get(name, 0)
            for name in after["tables"]}
    top = sorted(((n, g) for n, g in grew.items() if g), key=lambda kv: -kv[1])[:8]
    per_hour = (after["database"] - before["database"]) / hours
    # The sample tables and their rollups keep growing until their retention; the rest (alert
    # slices rebuilt in place, hosts updated by every batch) grows by dead rows that vacuum
    # reclaims.
    history = sum(g for n, g in grew.items() if n.startswith("telemetry_")) / hours
    return {"database_mb_per_hour": round(per_hour / 2**20, 1),
            "database_gib_per_day": round(per_hour * 24 / 2**30, 2),
            "history_mb_per_hour": round(history / 2**20, 1),
            "history_gib_per_day": round(history * 24 / 2**30, 2),
            "tables_mb_per_hour": {n: round(g / hours / 2**20, 1) for n, g in top},
            "database_mb_at_start": round(before["database"] / 2**20, 1),
            "database_mb_at_end": round(after["database"] / 2**20, 1)}


# -- the worker's log ------------------------------------------------------------------------

def task_times(log: Path, start: int, end: int) -> dict:
    """Run times of the Celery tasks that finished between two offsets of the stack's log."""
    with log.open("rb") as f:
        f.seek(start)
        text = f.read(end - start).decode(errors="replace")
    runs: dict[str, list[float]] = {}
    for name, seconds, returned in TASK_DONE.findall(text):
        if "'skipped': True" in returned:
            continue  # a cycle that found another holding the lock did no work
        runs.setdefault(name.rsplit(".", 1)[-1], []).append(float(seconds))
    slow = text.count("alert evaluation: a cycle of")
    cycles = runs.get("evaluate_rules", [])
    return {"tasks": {name: {"runs": len(s), "mean_s": round(sum(s) / len(s), 3),
                             "max_s": round(max(s), 3)} for name, s in sorted(runs.items())},
            "alert_cycles_longer_than_interval": slow, "alert_cycles_s": cycles}


# -- the run ---------------------------------------------------------------------------------

def measure(args, env: dict, tokens: Path, log: Path) -> dict:
    import psycopg

    dbname = harness.BENCH_DB
    stack = start_stack(args, env, log)
    vacuum = None
    try:
        monitor = psycopg.connect("host=127.0.0.1 dbname=postgres", autocommit=True)
        if args.vacuum_every and not autovacuum.server_autovacuum_on(monitor):
            vacuum = autovacuum.StandIn(f"host=127.0.0.1 dbname={dbname}", args.vacuum_every)
            vacuum.start()
        sizes = psycopg.connect(f"host=127.0.0.1 dbname={dbname}", autocommit=True)
        lg, window = start_loadgen(args, env, tokens)
        sampler = Sampler(stack.pid, monitor, dbname, lg.pid, {sizes.info.backend_pid})
        time.sleep(max(0.0, window["measure_from"] - time.monotonic()))
        before, log_from = db_state(sizes, dbname), log.stat().st_size
        sampler.start()
        while time.monotonic() + args.every < window["until"]:
            time.sleep(args.every)
            sampler.sample()
        sampler.stop()
        after, log_to = db_state(sizes, dbname), log.stat().st_size
        out, _ = lg.communicate(timeout=window["until"] - time.monotonic() + 2 * GRACE_S)
        with monitor.cursor() as cur:
            cur.execute("SELECT name, setting, unit FROM pg_settings WHERE name IN "
                        "('shared_buffers', 'autovacuum', 'max_wal_size')")
            pg_settings = {n: f"{v} x {u}" if u else v for n, v, u in cur.fetchall()}
        monitor.close()
        sizes.close()
    finally:
        if vacuum is not None:
            vacuum.stop()
        stop_stack(stack)
    return {"usage": sampler.report(), "load": json.loads(out.strip().splitlines()[-1]),
            "disk": disk_growth(before, after), "worker_log": task_times(log, log_from, log_to),
            # From the start: whether a cycle's cost grows while the alert windows fill.
            "alert_cycles_s_since_start": task_times(log, 0, log_to)["alert_cycles_s"],
            "gpu_rows_per_s": round((after["gpu_rows"] - before["gpu_rows"]) /
                                    (after["at"] - before["at"]), 1),
            "postgres_settings": pg_settings,
            "vacuum": vacuum_note(args, vacuum)}


def vacuum_note(args, vacuum: autovacuum.StandIn | None) -> str:
    if vacuum is not None:
        return (f"autovacuum off on the server: stand-in every {args.vacuum_every:g} s, "
                f"{vacuum.rounds} rounds, {vacuum.tables} tables vacuumed or analyzed")
    return "no stand-in: the server's autovacuum setting is in postgres_settings"


def summarise(args, run: dict) -> dict:
    from django.conf import settings
    usage = run["usage"]
    # Throughput from the rows stored during the window: the load generator's count of answered
    # batches includes those an agent behind schedule sent after the window.
    stored_batches = run["gpu_rows_per_s"] / args.gpus
    values_per_s = stored_batches * sum(loadgen.values_per_batch(args.gpus).values())
    billed = usage["billed"]
    raw_days = settings.PITWALL["RAW_RETENTION_DAYS"]
    history_gib = run["disk"]["history_gib_per_day"] * raw_days
    return {
        "machine": harness.machine(), "loadavg": os.getloadavg(), "agents": args.agents,
        "gpus_per_agent": args.gpus, "interval_s": args.interval, "warmup_s": args.warmup,
        "web_workers": args.web_workers or "runstack default", "database": harness.BENCH_DB,
        "redis_db": args.redis_db,
        # The load generator counts the batches sent in its window of args.duration seconds.
        "batches_stored_per_s": round(stored_batches, 1),
        "batches_offered_per_s": args.agents / args.interval,
        "gpu_rows_offered_per_s": args.agents * args.gpus / args.interval,
        "values_per_s": round(values_per_s), **run,
        "billed_cpu_s_per_million_values": round(billed["cores"] / max(values_per_s, 1) * 1e6,
                                                 2),
        "raw_retention_days": raw_days, "history_gib_at_raw_retention": round(history_gib, 1),
    }


def table(report: dict) -> str:
    lines = ["| process | pids | cores (mean) | CPU-s/min | RSS mean MB | RSS peak MB "
             "| PSS mean MB |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in report["usage"]["processes"]:
        lines.append(f"| {r['process']} | {r['pids']} | {r['cores']:.2f} | "
                     f"{r['cpu_s_per_min']:.1f} | {r['rss_mean_mb']:.0f} | "
                     f"{r['rss_peak_mb']:.0f} | {r['pss_mean_mb']:.0f} |")
    b, u = report["usage"]["billed"], report["usage"]
    hosts, gpus = report["agents"], report["agents"] * report["gpus_per_agent"]
    disk, log = report["disk"], report["worker_log"]
    cycle = log["tasks"].get("evaluate_rules")
    lines += [
        "",
        f"per {hosts:,} GPU hosts ({gpus:,} GPUs) at {1 / report['interval_s']:g} Hz: "
        f"{b['cores']:.2f} cores, {b['pss_peak_gib']:.2f} GiB (PSS peak; RSS summed "
        f"{b['rss_peak_gib']:.2f} GiB); PostgreSQL disk +{disk['database_mb_per_hour']:.0f} "
        f"MB/h, of which history (telemetry_*) +{disk['history_mb_per_hour']:.0f} MB/h = "
        f"{disk['history_gib_per_day']:.1f} GiB/day, about {report['history_gib_at_raw_retention']}"
        f" GiB held over the {report['raw_retention_days']}-day raw retention",
        f"load: {report['batches_stored_per_s']:.0f} batches/s stored of "
        f"{report['batches_offered_per_s']:.0f} offered, {report['values_per_s']:,} values/s, "
        f"{report['gpu_rows_per_s']:.0f} GPU rows/s stored of "
        f"{report['gpu_rows_offered_per_s']:.0f} offered, latency {report['load']['latency_ms']}"
        f", errors {report['load']['errors'] or 'none'}, agents still behind schedule "
        f"{GRACE_S:g} s after the window {report['load']['agents_behind_schedule_at_end']}; billed "
        f"{report['billed_cpu_s_per_million_values']} CPU-s per million values",
        f"alert cycle (worker log, {cycle['runs']} cycles): mean {cycle['mean_s']} s, max "
        f"{cycle['max_s']} s" if cycle else "alert cycle: none finished in the window",
        f"machine busy {u['machine_busy_cores']} cores over the window, of which "
        f"{u['unlisted_busy_cores']} in processes not listed (other sessions)",
        f"vacuum: {report['vacuum']}",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.loadgen_child:
        return loadgen_main(args)
    print(f"stack cost: database {harness.BENCH_DB}, Redis DB {args.redis_db}, "
          f"{args.agents} agents x {args.gpus} GPUs ...", flush=True)
    env, tokens = prepare(args)
    log = OUT_DIR / "stack_cost.log"
    try:
        run = measure(args, env, tokens, log)
    finally:
        tokens.unlink(missing_ok=True)
        import redis

        redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    report = summarise(args, run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
