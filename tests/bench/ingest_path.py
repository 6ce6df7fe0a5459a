"""CPU per batch of the ingest app itself (decode, checks, rows, group commit), no HTTP.

    python -m tests.bench.ingest_path --group 12 --rounds 300

The real IngestApp and PostgreSQL; each round hands ``--group`` agents' batches to the app at
once (one flush, as ``--group`` batches gathered in one flush window would be) and alternates
protocol v1 and v2 rounds, so both are measured in the same minutes. Reports this process's
CPU and the bench database's PostgreSQL CPU per batch and per million values. Process CPU
time, unlike latency, changes little when other work shares the cores; ``make bench-ingest``
measures the whole path with HTTP and the load generator.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import psutil

from tests.bench import harness, ingest, loadgen


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=240)
    parser.add_argument("--group", type=int, default=12, help="batches per flush")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--protocols", default="1,2")
    return parser.parse_args(argv)


async def post(app, token: str, body: bytes) -> int:
    scope = {"type": "http", "method": "POST", "path": "/api/v1/ingest",
             "headers": [(b"content-type", b"application/json"),
                         (b"authorization", f"Bearer {token}".encode())]}
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"]


async def run(args) -> dict:
    from controlplane.telemetry.ingest.app import IngestApp

    app = IngestApp()
    app.writer.flush_s = 0.002  # a round's batches arrive together: one flush each
    issued = await asyncio.to_thread(ingest.create_tokens, args.agents)
    protocols = [int(p) for p in args.protocols.split(",")]
    agents = {p: [loadgen.Agent(h, t, 8, p) for h, t in issued] for p in protocols}
    await app.startup()
    for agent in agents[protocols[0]]:  # register every host (inventory)
        assert await post(app, agent.token, agent.first_body()) == 200
    for p in protocols[1:]:
        for agent, first in zip(agents[p], agents[protocols[0]], strict=True):
            agent.seq = first.seq + 1_000_000  # other boot ids; inventories already known
    me = psutil.Process()
    backends = await asyncio.to_thread(harness.postgres_processes_of)  # the writer's included
    cpu = {p: [0.0, 0.0, 0] for p in protocols}  # server, postgres, batches
    for r in range(args.rounds):
        for p in protocols:
            start = (r * args.group) % args.agents
            group = [agents[p][(start + i) % args.agents] for i in range(args.group)]
            bodies = [(a.token, a.next_body()) for a in group]
            pg = harness.CpuMeter(lambda: backends)
            pg.start()
            before = sum(me.cpu_times()[:2])
            codes = await asyncio.gather(*(post(app, t, b) for t, b in bodies))
            cpu[p][0] += sum(me.cpu_times()[:2]) - before
            cpu[p][1] += pg.stop()
            cpu[p][2] += len(bodies)
            assert codes == [200] * len(bodies), codes
    await app.shutdown()
    values = sum(loadgen.values_per_batch(8).values())
    return {str(p): {"batches": n, "server_us_per_batch": round(s / n * 1e6),
                     "postgres_us_per_batch": round(g / n * 1e6),
                     "server_cpu_s_per_million_values": round(s / n / values * 1e6, 2),
                     "postgres_cpu_s_per_million_values": round(g / n / values * 1e6, 2)}
            for p, (s, g, n) in cpu.items()}


def main(argv=None) -> int:
    args = parse_args(argv)
    env = harness.bench_env()
    ingest.fresh_database(env)
    harness.use_bench_database(env)
    import django

    django.setup()
    started = time.monotonic()
    report = asyncio.run(run(args))
    report["group"], report["seconds"] = args.group, round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
