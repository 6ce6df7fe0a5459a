"""Where the ingest benchmark's slow requests come from: samplers and the trace's analysis.

During the measured window the benchmark samples, once a second, the machine (``/proc/stat``
steal and idle, the load average), PostgreSQL's checkpointer and WAL counters, and its own
event loop's lag and CPU (the load generator shares the cores). With ``--trace`` the server's
processes record per-request step instants, flushes, GC passes and their loop lag
(controlplane/telemetry/ingest/trace.py). ``analyse`` lines them up on the one monotonic clock
and reports, for the requests slower than the threshold, what else happened in their time.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import psutil

from tests.bench import harness

PG_SQL = """SELECT checkpoints_timed + checkpoints_req, buffers_checkpoint, checkpoint_write_time,
checkpoint_sync_time, (SELECT wal_bytes FROM pg_stat_wal) FROM pg_stat_bgwriter"""


def _cpu_times() -> list[int]:
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


class Sampler:
    """Once a second: machine steal/idle/load, PostgreSQL counters, this loop's lag and CPU."""

    def __init__(self) -> None:
        self.seconds: list[dict] = []
        self.lags: list[tuple[float, float]] = []  # this process's loop lag above 5 ms
        self._task: asyncio.Task | None = None
        self._lag_task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        self._lag_task = asyncio.create_task(self._lag())

    async def stop(self) -> None:
        for task in (self._task, self._lag_task):
            if task is not None:
                task.cancel()

    async def _lag(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            lag = time.monotonic() - before - 0.01
            if lag > 0.005:
                self.lags.append((before + 0.01, lag))

    async def _run(self) -> None:
        import psycopg

        me = psutil.Process()
        conn = await psycopg.AsyncConnection.connect(
            f"host=127.0.0.1 user=postgres dbname={harness.BENCH_DB}", autocommit=True)
        prev, prev_cpu = _cpu_times(), sum(me.cpu_times()[:2])
        try:
            while True:
                await asyncio.sleep(1.0)
                now, cpu = _cpu_times(), sum(me.cpu_times()[:2])
                delta = [b - a for a, b in zip(prev, now, strict=True)]
                total = max(1, sum(delta))
                cur = await conn.execute(PG_SQL)
                pg = await cur.fetchone()
                self.seconds.append({
                    "t": time.monotonic(), "steal_pct": round(100 * delta[7] / total, 1),
                    "idle_pct": round(100 * delta[3] / total, 1),
                    "load1": os.getloadavg()[0], "loadgen_cpu": round(cpu - prev_cpu, 3),
                    "checkpoints": pg[0], "buffers_checkpoint": pg[1],
                    "checkpoint_write_ms": pg[2], "checkpoint_sync_ms": pg[3],
                    "wal_bytes": int(pg[4])})
                prev, prev_cpu = now, cpu
        finally:
            await conn.close()


def machine_summary(seconds: list[dict]) -> dict:
    if not seconds:
        return {}
    steal = [s["steal_pct"] for s in seconds]
    return {"steal_pct_mean": round(sum(steal) / len(steal), 1), "steal_pct_max": max(steal),
            "idle_pct_mean": round(sum(s["idle_pct"] for s in seconds) / len(seconds), 1),
            "load1_start": seconds[0]["load1"], "load1_end": seconds[-1]["load1"],
            "checkpoints": seconds[-1]["checkpoints"] - seconds[0]["checkpoints"],
            "checkpoint_buffers": seconds[-1]["buffers_checkpoint"]
            - seconds[0]["buffers_checkpoint"]}


def _overlaps(start: float, end: float, events: list[tuple[float, float]]) -> bool:
    return any(s < end and s + d > start for s, d in events)


def _pct(values: list[float], q: float) -> float:
    return round(harness.percentile(values, q) * 1000, 1) if values else float("nan")


def analyse(client: list[tuple[float, float]], trace_files: list[Path], sampler: Sampler,
            window: tuple[float, float], slow_s: float) -> dict:
    """``client``: (sent, latency) of each measured request, on the monotonic clock."""
    start, end = window
    requests, flushes, gcs, lags = [], [], [], []
    for path in trace_files:
        data = json.loads(path.read_text())
        requests += [r for r in data["requests"] if start <= r[0] <= end]
        flushes += [f for f in data["flushes"] if start <= f[0] <= end]
        gcs += [(g[0], g[1]) for g in data["gc"] if start <= g[0] <= end]
        lags += [(t - lag, lag) for t, lag in data["lag"] if start <= t <= end]
    # Steps: started, read, decoded, queued, flush started, committed, answered.
    phases = {
        "handler_total": [r[6] - r[0] for r in requests],
        "read_body": [r[1] - r[0] for r in requests],
        "decode_validate": [r[2] - r[1] for r in requests],
        "prepare_rows": [r[3] - r[2] for r in requests],
        "wait_for_flush": [r[4] - r[3] for r in requests],
        "flush_to_commit": [r[5] - r[4] for r in requests],
        "commit_to_reply": [r[6] - r[5] for r in requests],
    }
    slow = [(t, lat) for t, lat in client if lat > slow_s]
    checkpoint_secs = [(s["t"] - 1, 1.0) for prev, s in zip(sampler.seconds,
                                                             sampler.seconds[1:], strict=False)
                       if s["buffers_checkpoint"] > prev["buffers_checkpoint"]]
    steal_secs = [(s["t"] - 1, 1.0) for s in sampler.seconds if s["steal_pct"] >= 10]
    server_lag = [e for e in lags if e[1] > 0.02]
    loadgen_lag = [(t - lag, lag) for t, lag in sampler.lags if lag > 0.02]
    long_gc = [g for g in gcs if g[1] > 0.005]
    flush_spans = [(f[0], f[-2] - f[0]) for f in flushes]
    long_flush = [f for f in flush_spans if f[1] > 0.05]

    def share(events: list) -> float:
        hits = sum(1 for t, lat in slow if _overlaps(t, t + lat, events))
        return round(100 * hits / len(slow), 1) if slow else 0.0

    return {
        "slow_threshold_ms": round(slow_s * 1000), "slow_requests": len(slow),
        "client_requests": len(client),
        "server_handler_ms": {name: {"p50": _pct(v, 0.5), "p99": _pct(v, 0.99),
                                     "max": _pct(v, 1.0)} for name, v in phases.items()},
        "flushes": {"count": len(flushes), "batches_mean": round(
            sum(f[1] for f in flushes) / max(1, len(flushes)), 1),
            "duration_ms": {"p50": _pct([d for _, d in flush_spans], 0.5),
                            "p99": _pct([d for _, d in flush_spans], 0.99),
                            "max": _pct([d for _, d in flush_spans], 1.0)},
            "over_50ms": len(long_flush)},
        "gc": {"passes": len(gcs), "over_5ms": len(long_gc),
               "max_ms": round(max((d for _, d in gcs), default=0) * 1000, 1),
               "gen2": sum(1 for g in gcs if g[1] > 0.05)},
        "server_loop_lag_over_20ms": {"count": len(server_lag), "max_ms": round(
            max((d for _, d in server_lag), default=0) * 1000, 1)},
        "loadgen_loop_lag_over_20ms": {"count": len(loadgen_lag), "max_ms": round(
            max((d for _, d in loadgen_lag), default=0) * 1000, 1)},
        "slow_requests_overlapping_pct": {
            "gc_pass_over_5ms": share(long_gc), "flush_over_50ms": share(long_flush),
            "server_loop_lag_over_20ms": share(server_lag),
            "loadgen_loop_lag_over_20ms": share(loadgen_lag),
            "checkpoint_writing_second": share(checkpoint_secs),
            "steal_over_10pct_second": share(steal_secs)},
    }
