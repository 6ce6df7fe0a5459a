"""Case 7: overload. The fleet streams at 1 Hz while a load generator offers three times the
ingest benchmark's rate (tests/bench/ingest.py: 1,000 agents with 8 GPUs at 1 Hz, so 3,000
batches/s) for 60 s, from hosts of its own. The server sheds what it cannot take with 503 +
Retry-After before reading the body, so its memory stays bounded; the fleet's agents spool
what was shed and replay it, none of their samples is lost, and every batch the generator got
a 200 for is stored.

The generator offers that rate (300 keep-alive connections, a batch every 0.1 s each, a late
one sent as soon as its reply came; Retry-After ignored) from a thread of this process; on
the 2-core test machine, shared with the server, PostgreSQL and the fleet, it made about
2,900-3,000 requests/s. The in-flight limit is set to 128 (the default is 256, which shed
here too, but a faster machine might keep up): by Little's law 3,000 batches/s waiting ~50 ms
on average in the group commit hold ~150 requests in flight, so a faster machine sheds
too.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import threading
import time
from dataclasses import dataclass, field

import orjson
import pytest

from tests.bench import loadgen
from tests.faults.harness import query, record_account

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]
LOAD_S = float(os.environ.get("PITWALL_FAULT_LOAD_S", 60))
BENCH_RATE = 1000  # batches/s: the ingest benchmark's 1,000 agents at 1 Hz
GENERATOR_AGENTS, GENERATOR_INTERVAL_S, GPUS = 300, 0.1, 8  # 3,000 batches/s offered
# Overridable to measure without shedding (limits far above the generator's 300 connections).
IN_FLIGHT = os.environ.get("PITWALL_FAULT_OVERLOAD_IN_FLIGHT", "128")
QUEUED_ROWS = os.environ.get("PITWALL_FAULT_OVERLOAD_QUEUED_ROWS", "40000")
MiB = 2**20


@dataclass
class Load:
    """What the generator got back."""

    ok: dict[str, list[float]] = field(default_factory=dict)  # hostname: ts answered 200
    shed: dict[str, int] = field(default_factory=dict)  # reason: 503s shed at the door
    unavailable: int = 0  # other 503s (storage)
    without_retry_after: int = 0  # 503s missing the header
    other: dict[str, int] = field(default_factory=dict)  # any other answer or error

    @property
    def answered_ok(self) -> int:
        return sum(len(v) for v in self.ok.values())

    def count(self, status: int, headers: dict[bytes, bytes], payload: bytes) -> None:
        if status != 503:
            key = f"HTTP {status}: {payload[:60]!r}"
            self.other[key] = self.other.get(key, 0) + 1
            return
        if b"retry-after" not in headers:
            self.without_retry_after += 1
        reason = orjson.loads(payload).get("shed")
        if reason is None:
            self.unavailable += 1
        else:
            self.shed[reason] = self.shed.get(reason, 0) + 1


def generator_agents(n: int) -> list[loadgen.Agent]:
    """Hosts and tokens of the generator's own, made in bulk (one by one is minutes)."""
    from controlplane.fleet.models import AgentToken, Host
    from controlplane.lib import tokens

    hosts = Host.objects.bulk_create([Host(hostname=f"overload-{i:04d}") for i in range(n)])
    agents, rows = [], []
    for host in hosts:
        token, lookup, digest = tokens.new_token(tokens.AGENT)
        rows.append(AgentToken(host=host, lookup=lookup, digest=digest))
        agents.append(loadgen.Agent(host.hostname, token, GPUS))
    AgentToken.objects.bulk_create(rows)
    return agents


async def register(agents: list[loadgen.Agent], port: int) -> None:
    """Each agent's first batch (with its inventory), again while it is shed."""
    semaphore = asyncio.Semaphore(8)

    async def one(agent: loadgen.Agent) -> None:
        async with semaphore:
            body = agent.first_body()
            for _ in range(600):
                conn = loadgen.Connection(port)
                status, _, payload = await conn.exchange(agent.token, body)
                conn.close()
                if status == 200:
                    return
                assert status == 503, f"registering {agent.hostname}: {status} {payload!r}"
                await asyncio.sleep(0.2)
            raise AssertionError(f"{agent.hostname} was never registered")

    await asyncio.gather(*(one(a) for a in agents))


async def offer(agent: loadgen.Agent, port: int, until: float, load: Load) -> None:
    """A batch every GENERATOR_INTERVAL_S; a late one is sent as soon as the reply came.
    Retry-After is ignored on purpose: this is load, not an agent."""
    conn = loadgen.Connection(port)
    load.ok.setdefault(agent.hostname, [])
    await asyncio.sleep(GENERATOR_INTERVAL_S * (hash(agent.hostname) % 100) / 100)
    next_at = time.monotonic()
    while next_at < until:
        agent.seq += 1
        ts = time.time()
        body = b"".join((agent.head, str(agent.seq).encode(), agent.middle,
                         repr(ts).encode(), agent.tail))
        try:
            status, headers, payload = await conn.exchange(agent.token, body)
        except (OSError, asyncio.IncompleteReadError) as exc:
            conn.close()
            load.other[type(exc).__name__] = load.other.get(type(exc).__name__, 0) + 1
        else:
            if status == 200:
                load.ok[agent.hostname].append(ts)
            else:
                load.count(status, headers, payload)
        next_at += GENERATOR_INTERVAL_S
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    conn.close()


class Generator:
    """The load, on an event loop of its own in a thread of this process."""

    def __init__(self, port: int, agents: list[loadgen.Agent]) -> None:
        self.port, self.agents, self.load = port, agents, Load()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.seconds = 0.0

    def register(self) -> None:
        asyncio.run_coroutine_threadsafe(register(self.agents, self.port), self.loop).result(600)

    def run(self, seconds: float) -> None:
        async def all_agents() -> None:
            until = time.monotonic() + seconds
            await asyncio.gather(*(offer(a, self.port, until, self.load) for a in self.agents))

        began = time.monotonic()
        asyncio.run_coroutine_threadsafe(all_agents(), self.loop).result(seconds + 600)
        self.seconds = time.monotonic() - began

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class RssSampler:
    """The web process's resident memory every half second while ``running``."""

    def __init__(self, stack) -> None:
        self.stack, self.samples, self._stop = stack, [], threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.samples, default=0)

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            self.samples.append(self.stack.rss_bytes("web"))


def not_stored(answered: dict[str, list[float]]) -> dict[str, int]:
    """Per generator host, the batches answered 200 whose sample is not in the database."""
    rows = query("SELECT h.hostname, extract(epoch FROM s.ts)::float8 FROM telemetry_host_sample s"
                 " JOIN fleet_host h ON h.id = s.host_id WHERE h.hostname = ANY(%s)",
                 (list(answered),))
    stored: dict[str, list[float]] = {}
    for hostname, ts in rows:
        stored.setdefault(hostname, []).append(ts)
    missing = {}
    for hostname, sent in answered.items():
        have = sorted(stored.get(hostname, []))
        gone = sum(1 for ts in sent if not _near(have, ts))
        if gone:
            missing[hostname] = gone
    return missing


def _near(sorted_ts: list[float], ts: float) -> bool:
    """A stored ts within a millisecond (microseconds on the way in; batches are 0.1 s apart)."""
    i = bisect.bisect_left(sorted_ts, ts - 1e-3)
    return i < len(sorted_ts) and sorted_ts[i] <= ts + 1e-3


def test_overload_is_shed_with_retry_after_and_loses_nothing_acknowledged(stack, fleet):
    stack.configure(PITWALL_INGEST_MAX_REQUESTS_IN_FLIGHT=IN_FLIGHT,
                    PITWALL_INGEST_MAX_QUEUED_ROWS=QUEUED_ROWS)
    stack.start()
    generator = Generator(stack.port, generator_agents(GENERATOR_AGENTS))
    try:
        generator.register()
        fleet.start()
        fleet.wait_stored(10)
        rss_before = stack.rss_bytes("web")
        rss = RssSampler(stack)
        generator.run(LOAD_S)
        rss_peak = rss.stop()
    finally:
        generator.close()
    spooled_after_load = fleet.spooled()
    load_ended = time.monotonic()
    drained_s = fleet.wait_drained(600)
    fleet.stop()
    rss_after = stack.rss_bytes("web")

    account = fleet.account()
    load = generator.load
    missing = not_stored(load.ok)
    shed = sum(load.shed.values())
    offered = GENERATOR_AGENTS / GENERATOR_INTERVAL_S
    achieved = (load.answered_ok + shed + load.unavailable) / generator.seconds
    record_account(
        "7. overload", account, injected=f"a load generator offering {offered:.0f} batches/s "
        f"(3x the ingest benchmark's {BENCH_RATE}) for {LOAD_S:.0f} s",
        duration_s=generator.seconds, recovery_s=drained_s,
        notes=f"{len(fleet.agents)} agents at 1 Hz beside the load; the generator achieved "
              f"{achieved:.0f} requests/s on this machine ({load.answered_ok} answered 200, "
              f"{shed} shed with 503 {load.shed}, {load.unavailable} other 503s, errors "
              f"{load.other}); limits: {IN_FLIGHT} requests in flight, {QUEUED_ROWS} queued "
              f"rows; web RSS {rss_before / MiB:.0f} MiB before, peak {rss_peak / MiB:.0f} "
              f"MiB, {rss_after / MiB:.0f} MiB after; {spooled_after_load} fleet batches "
              f"spooled when the load ended; recovery: from the end of the load until every "
              f"spool was empty; {sum(missing.values())} generator batches answered 200 and "
              f"not stored",
        generator={"offered_per_s": offered, "achieved_per_s": round(achieved),
                   "ok": load.answered_ok, "shed": load.shed, "unavailable": load.unavailable,
                   "errors": load.other},
        rss_mib={"before": rss_before // MiB, "peak": rss_peak // MiB,
                 "after": rss_after // MiB},
        seconds_to_drain=round(time.monotonic() - load_ended, 1))
    assert not fleet.crashed()
    assert shed > 0 and load.without_retry_after == 0
    assert not load.other, load.other  # 200 or 503, nothing else (no resets, no 500s)
    assert not missing, missing  # every batch answered 200 is stored
    # Bounded memory, generously: at most 1.5 times what the process held before the load.
    assert rss_peak <= 1.5 * rss_before
    assert account.lost == 0, account.hosts_short()
    assert account.duplicated == 0
