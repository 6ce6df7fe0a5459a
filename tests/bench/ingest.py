"""Ingest benchmark: N concurrent simulated agents against the real server and PostgreSQL.

    make bench-ingest                       # 1,000 agents x 8 GPUs at 1 Hz for 30 s
    python -m tests.bench.ingest --agents 1500 --duration 60 --workers 2

Each agent takes a sample a second (8 GPUs, one engine with 4 histograms, 2 processes) and
sends as the real agent does, over its own keep-alive connection: the samples of the hold the
server's replies ask for as one batch (5 s by default, a fleet no page watches: five samples a
request), each with a unique sequence number; ``--hold-s 0`` (the server asks for each sample
at once, as for watched hosts) or ``--samples-per-batch N`` (whatever the server asks) change
it. Reports requests, batches and samples per second, GPU rows/s, values/s, latency
percentiles, errors, and CPU-seconds per million stored values for the server and PostgreSQL.
The load generator runs on the same machine (its CPU is reported too).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import psutil
import uvloop

from tests.bench import harness, ingest_tail, loadgen


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between batches")
    parser.add_argument("--batches-per-request", type=int, default=1, metavar="N",
                        help="each agent sends N one-sample batches in one request every N "
                             "intervals (a replay's shape; the agent's --send-interval sends "
                             "one N-sample batch: --samples-per-batch)")
    parser.add_argument("--samples-per-batch", type=int, default=None, metavar="N",
                        help="one batch of N samples per request every N intervals, whatever "
                             "the server asks (default: as the agent does, the samples of the "
                             "hold its replies ask for, at most --send-interval)")
    parser.add_argument("--send-interval", type=float, default=5.0, metavar="S",
                        help="the agents' cap on the hold the server asks for (the agent's "
                             "flag; default 5)")
    parser.add_argument("--hold-s", type=float, default=None, metavar="S",
                        help="the server's PITWALL_AGENT_HOLD_S (default: the production "
                             "default, 5 s; 0: each sample sent as it is taken, as for a host "
                             "a page watches)")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument("--out", type=Path, default=harness.ROOT / "var" / "bench" /
                        "ingest.json")
    parser.add_argument("--protocol", type=int, choices=(1, 2), default=2,
                        help="the wire protocol the simulated agents send (docs/protocol.md)")
    parser.add_argument("--trace", action="store_true",
                        help="time each request's steps in the server and explain the slow ones")
    parser.add_argument("--slow-ms", type=float, default=100.0,
                        help="with --trace: requests slower than this are explained")
    args = parser.parse_args(argv)
    if args.batches_per_request > 1:
        if (args.samples_per_batch or 1) > 1:
            parser.error("--samples-per-batch and --batches-per-request do not combine")
        args.samples_per_batch = 1
    return args


def fresh_database(env: dict) -> None:
    """The bench database, copied from a migrated template (a file copy: seconds, where
    migrating takes minutes on a loaded machine). The template's name carries a digest of the
    migrations, so a new migration makes a new template."""
    import psycopg

    files = sorted((harness.ROOT / "controlplane").glob("*/migrations/*.py"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:10]
    template = f"{harness.BENCH_DB}_tpl_{digest}"
    with psycopg.connect("host=127.0.0.1 dbname=postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                        (template,)).fetchone() is None:
            harness.fresh_database(env)
            conn.execute(f"CREATE DATABASE {template} TEMPLATE {harness.BENCH_DB}")
            return
        conn.execute(f"DROP DATABASE IF EXISTS {harness.BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {harness.BENCH_DB} TEMPLATE {template}")


def create_tokens(n: int) -> list[tuple[str, str]]:
    import django

    django.setup()
    from controlplane.fleet.models import AgentToken, Host
    from controlplane.lib import tokens

    hosts = Host.objects.bulk_create([Host(hostname=f"bench-{i:05d}") for i in range(n)])
    issued, rows = [], []
    for host in hosts:
        token, lookup, digest = tokens.new_token(tokens.AGENT)
        rows.append(AgentToken(host=host, lookup=lookup, digest=digest))
        issued.append((host.hostname, token))
    AgentToken.objects.bulk_create(rows)
    return issued


def count_rows() -> dict[str, int]:
    from django.db import connection

    from controlplane.telemetry.schema import TABLES

    counts = {}
    with connection.cursor() as cursor:
        for table in TABLES.values():
            cursor.execute(f"SELECT count(*) FROM {table.name}")
            counts[table.entity] = cursor.fetchone()[0]
    return counts


async def drive(args, agents, server_pid) -> dict:
    await loadgen.register(agents, args.port)
    results = loadgen.Results()
    start = time.monotonic()
    measure_from = start + args.warmup
    until = measure_from + args.duration
    server_cpu = harness.CpuMeter(lambda: harness.process_tree(server_pid))
    pg_cpu = harness.CpuMeter(harness.postgres_processes_of)
    self_cpu = harness.CpuMeter(lambda: [psutil.Process()])
    sampler = ingest_tail.Sampler()
    tasks = [asyncio.create_task(loadgen.run_agent(a, args.port, args.interval, until,
                                                   measure_from, results,
                                                   args.batches_per_request,
                                                   args.samples_per_batch,
                                                   args.send_interval))
             for a in agents]
    await asyncio.sleep(max(0.0, measure_from - time.monotonic()))
    rows_before = await asyncio.to_thread(count_rows)
    for meter in (server_cpu, pg_cpu, self_cpu):
        meter.start()
    sampler.start()
    wall = time.monotonic()
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    elapsed = time.monotonic() - wall
    cpu = {"server": server_cpu.stop(), "postgres": pg_cpu.stop(), "loadgen": self_cpu.stop()}
    await sampler.stop()
    rows_after = await asyncio.to_thread(count_rows)
    await asyncio.gather(*tasks)
    report = summarise(args, results, elapsed, cpu, rows_before, rows_after)
    report["machine_load"] = ingest_tail.machine_summary(sampler.seconds)
    return report, sampler, (measure_from, until)


def summarise(args, results, elapsed, cpu, before, after) -> dict:
    stored = {k: after[k] - before[k] for k in after}
    per_batch = loadgen.values_per_batch(args.gpus)
    values = sum(stored[k] * per_batch[k] / max(1, {"host": 1, "gpu": args.gpus, "engine": 1,
                                                     "proc": 2}[k]) for k in stored)
    lat = results.latencies
    return {
        "machine": harness.machine(), "agents": args.agents, "gpus_per_agent": args.gpus,
        "protocol": args.protocol,
        "workers": args.workers, "interval_s": args.interval, "measured_s": round(elapsed, 1),
        "batches_per_request": args.batches_per_request,
        "samples_per_batch": args.samples_per_batch or "as the server asks",
        "hold_s": args.hold_s if args.hold_s is not None else "default",
        "samples_per_request": round(results.samples / max(results.ok, 1), 2),
        "batches_per_s": round(results.batches / elapsed, 1),
        "samples_per_s": round(results.samples / elapsed, 1),
        "requests_per_s": round(results.ok / elapsed, 1),
        "gpu_rows_per_s": round(stored["gpu"] / elapsed, 1),
        "values_per_s": round(values / elapsed, 1),
        "latency_ms": {q: round(harness.percentile(lat, p) * 1000, 1)
                       for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99),
                                    ("max", 1.0))},
        "errors": results.errors,
        "cpu_s": {k: round(v, 2) for k, v in cpu.items()},
        "cpu_s_per_million_values": {k: round(v / max(values, 1) * 1e6, 2)
                                     for k, v in cpu.items()},
        "cores_busy": {k: round(v / elapsed, 2) for k, v in cpu.items()},
        "stored_rows": stored,
        "sent": results.sent, "latencies": lat,  # for the tail analysis, then dropped
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    env = harness.bench_env()
    if args.hold_s is not None:
        env["PITWALL_AGENT_HOLD_S"] = str(args.hold_s)
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE",
                                            "SECRET_KEY", "SECURE_SSL_REDIRECT")})
    print(f"ingest bench: fresh database {harness.BENCH_DB}, {args.agents} agents ...",
          flush=True)
    fresh_database(env)
    issued = create_tokens(args.agents)
    agents = [loadgen.Agent(hostname, token, args.gpus, args.protocol)
              for hostname, token in issued]
    trace_dir = harness.ROOT / "var" / "bench" / "ingest-trace"
    if args.trace:
        trace_dir.mkdir(parents=True, exist_ok=True)
        for old in trace_dir.glob("server.*.json"):
            old.unlink()
        env["PITWALL_INGEST_TRACE"] = str(trace_dir / "server")
    with harness.server(env, args.port, args.workers) as proc:
        # uvloop: the load generator shares the 2 cores, so its own loop should cost little.
        report, sampler, window = uvloop.run(drive(args, agents, proc.pid))
    if args.trace:  # the server's processes wrote their traces as they stopped
        report["tail"] = ingest_tail.analyse(
            list(zip(report.pop("sent"), report.pop("latencies"), strict=True)),
            sorted(trace_dir.glob("server.*.json")), sampler, window, args.slow_ms / 1000)
    report.pop("sent", None)
    report.pop("latencies", None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    ok = not report["errors"] and report["latency_ms"]["p99"] < 250
    rate = args.agents / args.interval
    ok = ok and report["samples_per_s"] >= 0.99 * rate
    print(f"target >= {rate:.0f} samples/s, p99 < 250 ms, no errors: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
