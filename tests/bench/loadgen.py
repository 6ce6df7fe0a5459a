"""An HTTP/1.1 load generator for the ingest endpoint: N simulated agents, keep-alive each.

Bodies are prepared once per agent as byte templates (only ts and seq change), so the
generator spends its CPU on sockets, not on building JSON: it shares the 2 cores with the
server and PostgreSQL and must stay cheap.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field

import orjson

from agents.loop import samples_in_hold
from agents.protocol import to_columns
from agents.spool import join_batches
from agents.transport import asked_hold

GPU_VALUES = {
    "mem_used_bytes": 72 * 2**30, "mem_total_bytes": 80 * 2**30, "util_pct": 97.0,
    "mem_util_pct": 61.0, "temp_c": 67.0, "power_w": 612.5, "power_limit_w": 700.0,
    "sm_clock_mhz": 1980.0, "mem_clock_mhz": 2619.0, "pcie_tx_bps": 1.2e9,
    "pcie_rx_bps": 3.4e8, "throttle_reasons": 0, "ecc_dbe_total": 0,
}
TTFT_LE = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
           7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]


def inventory(hostname: str, gpus: int) -> dict:
    return {"hostname": hostname, "simulated": True, "cpu_count": 64, "cpu_model": "bench",
            "mem_total_bytes": 512 * 2**30, "numa_nodes": [{"id": 0, "cpus": list(range(64))}],
            "gpus": [{"uuid": f"GPU-{hostname}-{i}", "index": i, "name": "bench H100",
                      "mem_total_bytes": 80 * 2**30, "simulated": True} for i in range(gpus)],
            "engines": [{"name": "vllm:8000/0", "model": "bench", "simulated": True}]}


def sample_template(hostname: str, gpus: int) -> dict:
    return {
        "ts": 0.0,
        "host": {"cpu_pct": 23.0, "cpu_core_pct": [23.0] * 16, "load1": 3.1,
                 "mem_used_bytes": 100 * 2**30, "mem_total_bytes": 512 * 2**30,
                 "swap_used_bytes": 0, "net_rx_bps": 1e6, "net_tx_bps": 2e6,
                 "disk_read_bps": 0.0, "disk_write_bps": 1e5},
        "gpus": [{"uuid": f"GPU-{hostname}-{i}", **GPU_VALUES} for i in range(gpus)],
        "engines": [{"name": "vllm:8000/0", "up": 1, "requests_running": 42,
                     "requests_waiting": 3, "kv_cache_usage": 0.61,
                     "prefix_cache_hit_rate": 0.3, "preemptions_per_s": 0.0,
                     "prompt_tokens_per_s": 5400.0, "generation_tokens_per_s": 2100.0,
                     "requests_finished_per_s": 4.0,
                     **{h: {"le": TTFT_LE, "counts": [0, 1, 2, 1] + [0] * 19, "sum": 0.05}
                        for h in ("ttft_seconds", "itl_seconds", "e2e_seconds",
                                  "queue_seconds")}}],
        "processes": [{"pid": 1000 + i, "engine": "vllm:8000/0", "cpu_pct": 95.0,
                       "rss_bytes": 3 * 2**30, "threads": 50, "cpu_affinity": [0, 1, 2, 3],
                       "numa_nodes": [0]} for i in range(2)],
    }


def values_per_batch(gpus: int) -> dict[str, int]:
    s = sample_template("x", gpus)
    count = {"host": len(s["host"]) - 1 + 16, "gpu": sum(len(g) - 1 for g in s["gpus"]),
             "engine": sum(len(e) - 1 for e in s["engines"]),
             "proc": sum(len(p) - 1 for p in s["processes"])}
    return count


class Agent:
    """One simulated agent: a boot id, a seq counter, a body template (protocol 1 or 2)."""

    def __init__(self, hostname: str, token: str, gpus: int, protocol: int = 2,
                 host: dict | None = None) -> None:
        """``host``: the inventory its first batch registers (default: ``gpus`` bench GPUs)."""
        self.hostname, self.token, self.gpus = hostname, token, gpus
        self.protocol = protocol
        self.host = host or inventory(hostname, gpus)
        self.boot_id = str(uuid.uuid4())
        self.seq = 0
        self.hold_s = 0.0  # what the server's last reply asked (agents.transport.asked_hold)
        raw = orjson.dumps(self._wire(self._v1(123456789, [1.5e9])))
        self.head, rest = raw.split(b"123456789", 1)
        self.middle, self.tail = rest.split(b"1500000000.0", 1)

    def first_body(self) -> bytes:
        self.seq += 1
        body = self._v1(self.seq, [time.time()], self.host)
        return orjson.dumps(self._wire(body))

    def _v1(self, seq: int, times: list[float], host: dict | None = None) -> dict:
        """A v1 batch of this agent: one sample per instant of ``times``, the inventory
        with it when given."""
        body: dict = {"protocol": 1, "agent": {"version": "bench", "boot_id": self.boot_id,
                                               "seq": seq}}
        if host is not None:
            body["host"] = host
        body["samples"] = [sample_template(self.hostname, self.gpus) | {"ts": ts}
                           for ts in times]
        return body

    def _wire(self, body: dict) -> dict:
        return to_columns(body) if self.protocol == 2 else body

    def next_body(self, batches: int = 1, interval: float = 1.0) -> bytes:
        """The next request: one batch, or ``batches`` consecutive ones sampled ``interval``
        apart (the newest now) in one v2 multi-batch body, as an agent that sends less often
        than it samples does."""
        if batches == 1:
            return self._batch(time.time())
        now = time.time()
        return join_batches([self._batch(now - (batches - 1 - k) * interval)
                             for k in range(batches)])

    def multi_sample_body(self, samples: int, interval: float = 1.0) -> bytes:
        """One batch of ``samples`` samples taken ``interval`` apart (the newest now), as the
        agent sends with ``--send-interval``: one seq, each sample its own ts."""
        self.seq += 1
        now = time.time()
        times = [now - (samples - 1 - k) * interval for k in range(samples)]
        return orjson.dumps(self._wire(self._v1(self.seq, times)))

    def _batch(self, ts: float) -> bytes:
        self.seq += 1
        return b"".join((self.head, str(self.seq).encode(), self.middle,
                         repr(ts).encode(), self.tail))


@dataclass
class Results:
    latencies: list[float] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)  # monotonic send instant of each latency
    errors: dict[str, int] = field(default_factory=dict)
    ok: int = 0  # requests answered 200
    batches: int = 0  # the batches those requests carried
    samples: int = 0  # the samples those batches carried (one per agent per interval)

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


class Connection:
    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, token: str, body: bytes) -> tuple[int, bytes]:
        status, _, payload = await self.exchange(token, body)
        return status, payload

    async def exchange(self, token: str, body: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
        """One POST on the kept-alive connection: status, headers (lower-case names), body."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(b"".join((
            b"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nAuthorization: Bearer ", token.encode(),
            b"\r\nContent-Length: ", str(len(body)).encode(), b"\r\n\r\n", body)))
        status_line = await self.reader.readline()
        if not status_line:  # the server closed the kept-alive connection (idle too long)
            self.close()
            raise ConnectionResetError("the server closed the connection")
        headers = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        payload = await self.reader.readexactly(int(headers.get(b"content-length", 0)))
        if headers.get(b"connection") == b"close":
            self.close()
        return int(status_line.split(b" ", 2)[1]), headers, payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def post_once_more_if_stale(conn: Connection, token: str,
                                  body: bytes) -> tuple[int, bytes]:
    """As the agent does: a kept-alive connection the server closed while it idled (uvicorn's
    keep-alive is 5 s; an agent sending every 5 s or more meets it) is retried once, fresh."""
    reused = conn.writer is not None
    try:
        return await conn.post(token, body)
    except (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError):
        conn.close()
        if not reused:
            raise
        return await conn.post(token, body)


def held_samples(agent: Agent, interval: float, samples_per_batch: int | None,
                 cap_s: float) -> int:
    """Samples in the agent's next batch: ``samples_per_batch`` if fixed, else those of the
    hold the server's last reply asked for, at most ``cap_s``, as the agent counts them."""
    if samples_per_batch is not None:
        return samples_per_batch
    return samples_in_hold(agent.hold_s, cap_s, interval)


async def run_agent(agent: Agent, port: int, interval: float, until: float,
                    measure_from: float, results: Results, batches_per_request: int = 1,
                    samples_per_batch: int | None = 1, cap_s: float = 5.0) -> None:
    """Send as an agent does until ``until``; ``samples_per_batch`` None: as many samples a
    batch as the replies' ``hold_s`` asks (at most ``cap_s``, the agent's --send-interval)."""
    conn = Connection(port)
    per_batch = held_samples(agent, interval, samples_per_batch, cap_s)
    # Spread the agents over their sending period, as real agents started at random moments
    # are.
    await asyncio.sleep(random.random() * interval * batches_per_request * per_batch)
    next_at = time.monotonic()
    while next_at < until:
        per_batch = held_samples(agent, interval, samples_per_batch, cap_s)
        body = (agent.multi_sample_body(per_batch, interval) if per_batch > 1
                else agent.next_body(batches_per_request, interval))
        started = time.monotonic()
        try:
            status, payload = await post_once_more_if_stale(conn, agent.token, body)
        except (OSError, asyncio.IncompleteReadError) as exc:
            conn.close()
            if started >= measure_from:
                results.error(type(exc).__name__)
        else:
            if started >= measure_from:
                if status == 200:
                    results.ok += 1
                    results.batches += batches_per_request
                    results.samples += batches_per_request * per_batch
                    results.latencies.append(time.monotonic() - started)
                    results.sent.append(started)
                else:
                    results.error(f"HTTP {status}: {payload[:80]!r}")
            if status == 200:
                agent.hold_s = asked_hold(orjson.loads(payload))
        next_at += interval * batches_per_request * per_batch
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    conn.close()


async def register(agents: list[Agent], port: int) -> None:
    """Send each agent's first batch (with its inventory), a few at a time."""
    semaphore = asyncio.Semaphore(16)

    async def one(agent: Agent) -> None:
        async with semaphore:
            conn = Connection(port)
            status, payload = await conn.post(agent.token, agent.first_body())
            conn.close()
            if status != 200:
                raise RuntimeError(f"registering {agent.hostname}: {status} {payload!r}")
            agent.hold_s = asked_hold(orjson.loads(payload))

    await asyncio.gather(*(one(a) for a in agents))
