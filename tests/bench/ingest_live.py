"""The ingest benchmark with browsers watching: live push's cost on the ingest path.

    python -m tests.bench.ingest_live --watchers 5      # plus every flag of tests.bench.ingest

The same load as ``tests.bench.ingest`` (1,000 agents x 8 GPUs at 1 Hz, 2 server workers), and
``--watchers`` signed-in WebSocket clients on the same server, each subscribed to the fleet, one
host and its engine (as a fleet page and a host page would be). Compare its latency and server
CPU with a plain ``tests.bench.ingest`` run on the same machine; the report adds how many events
the watchers received and how late (sample ts to arrival, p50/p99).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

import orjson
import psutil

from tests.bench import harness, ingest, loadgen
from tests.support.roles import user_with_role


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watchers", type=int, default=5)
    parser.add_argument("--kinds", default="fleet,host,engine",
                        help="what each watcher subscribes to (its own host and engine)")
    own, rest = parser.parse_known_args(argv)
    args = ingest.parse_args(rest)
    args.watchers, args.kinds = own.watchers, own.kinds.split(",")
    args.out = args.out.with_name("ingest_live.json")
    return args


def session_cookie() -> str:
    from django.test import Client

    browser = Client()
    browser.force_login(user_with_role("bench-viewer", "viewer"))
    return browser.cookies["sessionid"].value


def watched_groups(n: int, kinds: list[str]) -> list[list[str]]:
    from controlplane.fleet.models import Engine

    engines = Engine.objects.order_by("host_id").values_list("host_id", "id")[:n]
    names = {"fleet": lambda h, e: "fleet", "host": lambda h, e: f"host:{h}",
             "engine": lambda h, e: f"engine:{e}"}
    return [[names[k](host, engine) for k in kinds] for host, engine in engines]


class Watcher:
    def __init__(self, port: int, cookie: str, groups: list[str]) -> None:
        self.port, self.cookie, self.groups = port, cookie, groups
        self.counts: dict[str, int] = {}
        self.lag: list[float] = []

    async def run(self, until: float) -> None:
        from websockets.asyncio.client import connect

        headers = {"Cookie": f"sessionid={self.cookie}", "Origin": f"http://127.0.0.1:{self.port}"}
        async with connect(f"ws://127.0.0.1:{self.port}/ws/live/",
                           additional_headers=headers) as socket:
            await socket.send(orjson.dumps({"type": "subscribe", "groups": self.groups}).decode())
            pinger = asyncio.create_task(self._ping(socket))
            while (left := until - time.monotonic()) > 0:
                try:
                    text = await asyncio.wait_for(socket.recv(), left)
                except TimeoutError:
                    break
                self._count(orjson.loads(text))
            pinger.cancel()

    async def _ping(self, socket) -> None:
        while True:
            await asyncio.sleep(20)
            await socket.send('{"type": "ping"}')

    def _count(self, message: dict) -> None:
        kind = message["type"]
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind in ("host", "engine"):
            self.lag.extend(time.time() - s["ts"] for s in message["samples"])


async def drive(args, agents, server_pid, cookie) -> dict:
    await loadgen.register(agents, args.port)
    groups = await asyncio.to_thread(watched_groups, args.watchers, args.kinds)
    results = loadgen.Results()
    start = time.monotonic()
    measure_from, until = start + args.warmup, start + args.warmup + args.duration
    watchers = [Watcher(args.port, cookie, g) for g in groups]
    watching = [asyncio.create_task(w.run(until)) for w in watchers]
    meters = {"server": harness.CpuMeter(lambda: harness.process_tree(server_pid)),
              "postgres": harness.CpuMeter(harness.postgres_processes),
              "loadgen": harness.CpuMeter(lambda: [psutil.Process()])}
    tasks = [asyncio.create_task(loadgen.run_agent(a, args.port, args.interval, until,
                                                   measure_from, results)) for a in agents]
    await asyncio.sleep(max(0.0, measure_from - time.monotonic()))
    rows_before = await asyncio.to_thread(ingest.count_rows)
    for meter in meters.values():
        meter.start()
    wall = time.monotonic()
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    elapsed = time.monotonic() - wall
    cpu = {name: meter.stop() for name, meter in meters.items()}
    rows_after = await asyncio.to_thread(ingest.count_rows)
    await asyncio.gather(*tasks, *watching)
    report = ingest.summarise(args, results, elapsed, cpu, rows_before, rows_after)
    lag = sorted(x for w in watchers for x in w.lag)
    report["watchers"] = {
        "count": len(watchers), "groups_each": groups[0] if groups else [],
        "events": {k: sum(w.counts.get(k, 0) for w in watchers)
                   for k in ("subscribed", "host", "engine", "fleet", "pong")},
        "lag_ms": {q: round(harness.percentile(lag, p) * 1000, 1)
                   for q, p in (("p50", 0.5), ("p99", 0.99))}}
    return report


def main(argv=None) -> int:
    args = parse_args(argv)
    env = harness.bench_env()
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE",
                                            "SECRET_KEY", "SECURE_SSL_REDIRECT")})
    print(f"ingest bench with {args.watchers} watchers: fresh database {harness.BENCH_DB}, "
          f"{args.agents} agents ...", flush=True)
    harness.fresh_database(env)
    issued = ingest.create_tokens(args.agents)
    cookie = session_cookie()
    agents = [loadgen.Agent(hostname, token, args.gpus) for hostname, token in issued]
    with harness.server(env, args.port, args.workers) as proc:
        report = asyncio.run(drive(args, agents, proc.pid, cookie))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
