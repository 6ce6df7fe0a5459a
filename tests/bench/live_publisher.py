"""Live publisher cost: CPU per ingest batch of live push, with and without watchers.

    python -m tests.bench.live_publisher [--batches 1000] [--per-flush 25]

Builds the bench agent's batches (8 GPUs, one engine with four 22-bucket histograms, two
processes: tests/bench/loadgen.py) into real ingest rows, then feeds them to the real
``Publisher`` the way the writer does (``--per-flush`` batches per commit: 1,000 batches/s in
25 ms flush windows) and sends what it queues through the real channel layer (Redis; each
watched group has one member channel, as if one browser watched it). One second of traffic
at 1,000 batches/s, so the fleet summary is built once, over every host. Reported per batch:
the after-commit callback (in the writer's flush), the background sender (build, encode,
publish: CPU of this process) and Redis' CPU. Needs Redis, not PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import sys
import time
import uuid

import psutil


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--per-flush", type=int, default=25)
    parser.add_argument("--gpus", type=int, default=8)
    return parser.parse_args(argv)


def work_items(n: int, gpus: int) -> list:
    """n committed batches of n hosts (ids 1..n), rows built by the real ingest code."""
    from controlplane.telemetry.ingest.registry import HostState
    from controlplane.telemetry.ingest.rows import build_tables
    from controlplane.telemetry.ingest.validate import parse_request
    from controlplane.telemetry.ingest.writer import Work
    from tests.bench import loadgen

    layouts = {tuple(loadgen.TTFT_LE): 1}
    items = []
    for host_id in range(1, n + 1):
        name = f"bench-{host_id}"
        sample = loadgen.sample_template(name, gpus) | {"ts": time.time()}
        body = {"protocol": 1, "agent": {"version": "b", "boot_id": str(uuid.uuid4()), "seq": 1},
                "samples": [sample]}
        batch = parse_request(body).batches[0]
        state = HostState(host_id, name, "", {f"GPU-{name}-{i}": host_id * 100 + i
                                              for i in range(gpus)},
                          {"vllm:8000/0": host_id})
        items.append(Work(host_id=host_id, boot_id=batch.boot_id, seq=1, agent_version="b",
                          tables=build_tables(state, batch, layouts), days=set()))
    return items, layouts


async def scenario(name: str, groups: frozenset[str], items: list, layouts: dict,
                   per_flush: int) -> dict:
    from channels.layers import get_channel_layer

    from controlplane.realtime.publisher import Publisher

    layer = get_channel_layer()
    for group in groups:  # one browser per watched group
        await layer.group_add(group, f"specific.bench!{uuid.uuid4().hex}")
    publisher = Publisher(layouts)
    publisher._watch(groups)
    for _ in range(2):  # the first pass opens the Redis connections; the second is measured
        measured = await one_second(publisher, items, per_flush)
    await layer.flush()
    return {"scenario": name, "watched_groups": len(groups), **measured,
            "dropped": publisher.dropped}


async def one_second(publisher, items: list, per_flush: int) -> dict:
    """One second of traffic: every batch through on_commit and the sender, one summary."""
    redis_server = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "redis-server"]
    redis_before = sum(sum(p.cpu_times()[:2]) for p in redis_server)
    callback_s = sender_cpu = 0.0
    events = 0
    publisher._fleet_sent = time.monotonic()  # the summary is due only at the end
    for start in range(0, len(items), per_flush):
        t0 = time.perf_counter()
        publisher.on_commit(items[start:start + per_flush])
        callback_s += time.perf_counter() - t0
        events += len(publisher._queue)
        c0 = time.process_time()
        await publisher._send_pending()
        sender_cpu += time.process_time() - c0
    publisher._fleet_sent = -math.inf
    events += bool(publisher._fleet)
    c0 = time.process_time()
    await publisher._send_pending()
    sender_cpu += time.process_time() - c0
    redis_cpu = sum(sum(p.cpu_times()[:2]) for p in redis_server) - redis_before
    n = len(items)
    return {"events": events, "after_commit_us_per_batch": round(callback_s / n * 1e6, 2),
            "sender_cpu_us_per_batch": round(sender_cpu / n * 1e6, 1),
            "sender_cpu_us_per_event": round(sender_cpu / events * 1e6, 1) if events else None,
            "redis_cpu_us_per_batch": round(redis_cpu / n * 1e6, 1)}


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    from django.conf import settings

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": [settings.REDIS_URL],
                                                      "prefix": f"bench-{uuid.uuid4().hex}"}}}
    django.setup()
    logging.getLogger("channels_redis").setLevel(logging.WARNING)  # "over capacity" notes
    items, layouts = work_items(args.batches, args.gpus)
    n = args.batches
    pages = frozenset({"host.1", "host.2", "host.3", "engine.1", "engine.2", "engine.3"})
    every = frozenset({"fleet", *(f"host.{i}" for i in range(1, n + 1)),
                       *(f"engine.{i}" for i in range(1, n + 1))})
    report = []
    for name, groups in (("nobody watches", frozenset()),
                         ("3 host pages + 3 engine pages", pages),
                         (f"a fleet page ({n} hosts in its summary)", frozenset({"fleet"})),
                         ("every host and engine watched (no interest filter)", every)):
        report.append(asyncio.run(scenario(name, groups, items, layouts, args.per_flush)))
    print(json.dumps({"batches": n, "per_flush": args.per_flush, "results": report}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
