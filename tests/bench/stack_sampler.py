"""Which processes make up the running stack, and their CPU and memory over a window (psutil).

Used by the stack-cost benchmark (tests/bench/stack_cost.py). Attribution:

- the stack: ``manage.py runstack`` and every process under it, labelled by what it runs (the
  ASGI server, the Celery worker and its pool processes, beat);
- PostgreSQL: the backends whose ``pg_stat_activity.datname`` is the stack's database (client
  backends, and autovacuum or parallel workers when there are any), summed into one row; the
  server-wide processes (postmaster, checkpointer, background writer, walwriter, launchers)
  each a row, billed in full although every database on the server shares them (an upper
  bound when other sessions write too);
- Redis: the redis-server process, billed in full (it also serves other DB numbers);
- not billed: the load generator, this sampler, and the other databases' backends.

Memory: RSS counts a shared page once in every process that maps it (PostgreSQL's shared
buffers, a forked Celery pool's copy-on-write pages); PSS divides it among them, so PSS sums.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import psutil

MB = 2**20
PG_BACKGROUND = {"checkpointer", "background writer", "walwriter", "autovacuum launcher",
                 "logical replication launcher", "archiver", "startup", "walsender"}


@dataclass
class Tracked:
    label: str
    billed: bool
    cpu0: float  # CPU seconds when first seen (0 for a process born inside the window)
    cpu1: float = 0.0


@dataclass
class Row:
    label: str
    billed: bool
    pids: set[int] = field(default_factory=set)
    rss: list[float] = field(default_factory=list)  # per sample, summed over the row's pids
    pss: list[float] = field(default_factory=list)
    cpu_s: float = 0.0


def stack_label(proc: psutil.Process, root_pid: int) -> str:
    """What a process under ``manage.py runstack`` is, from its command line and parent."""
    if proc.pid == root_pid:
        return "runstack (supervisor)"
    cmd = " ".join(proc.cmdline())
    parent = proc.parent()
    parent_cmd = " ".join(parent.cmdline()) if parent else ""
    if "uvicorn" in cmd:
        return "web: uvicorn"
    if "celery" in cmd and " worker" in cmd:
        # The pool processes are forks of the worker: same command line, the worker as parent.
        return "celery worker" if parent and parent.pid == root_pid else \
            "celery worker: pool process"
    if "celery" in cmd and " beat" in cmd:
        return "celery beat"
    if "resource_tracker" in cmd:
        return "web: multiprocessing resource tracker"
    if "spawn_main" in cmd and "uvicorn" in parent_cmd:
        return "web: uvicorn worker process"
    return f"stack: other ({proc.name()})"


class Sampler:
    """Call ``sample()`` every second or so between ``start()`` and ``stop()``."""

    def __init__(self, root_pid: int, pg_conn, dbname: str, loadgen_pid: int,
                 exclude_pg_pids: set[int]) -> None:
        self.root_pid, self.pg, self.dbname = root_pid, pg_conn, dbname
        self.loadgen_pid, self.exclude = loadgen_pid, exclude_pg_pids
        self.tracked: dict[int, Tracked] = {}
        self.rows: dict[str, Row] = {}
        self.started = self.stopped = 0.0
        self.busy0 = self.busy1 = 0.0
        self.ticks: list[dict[str, list[float]]] = []  # per sample: label -> [rss, pss]

    def start(self) -> None:
        self.started = time.time()
        self.busy0 = machine_busy_s()
        self.sample()

    def stop(self) -> None:
        self.sample()
        self.stopped = time.time()
        self.busy1 = machine_busy_s()

    def sample(self) -> None:
        tick: dict[str, list[float]] = {}
        for proc, label, billed in self.discover():
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    cpu = t.user + t.system
                    mem = proc.memory_full_info()
                    born = proc.create_time()
            except psutil.Error:
                continue  # it exited between discovery and now
            seen = self.tracked.get(proc.pid)
            if seen is None:
                seen = self.tracked[proc.pid] = Tracked(
                    label, billed, 0.0 if born >= self.started else cpu)
            seen.cpu1 = cpu
            row = self.rows.setdefault(label, Row(label, billed))
            row.pids.add(proc.pid)
            rss_pss = tick.setdefault(label, [0.0, 0.0])
            rss_pss[0] += mem.rss
            rss_pss[1] += mem.pss
        for label, (rss, pss) in tick.items():
            self.rows[label].rss.append(rss)
            self.rows[label].pss.append(pss)
        self.ticks.append(tick)

    def discover(self) -> list[tuple[psutil.Process, str, bool]]:
        found = []
        root = psutil.Process(self.root_pid)
        for proc in (root, *root.children(recursive=True)):
            with contextlib.suppress(psutil.Error):  # it exited meanwhile
                found.append((proc, stack_label(proc, self.root_pid), True))
        found += self.postgres()
        found += [(p, "redis-server (shared by every DB number)", True)
                  for p in psutil.process_iter(["name"]) if p.info["name"] == "redis-server"]
        lg = psutil.Process(self.loadgen_pid)
        found += [(p, "load generator (not billed)", False)
                  for p in (lg, *lg.children(recursive=True))]
        found.append((psutil.Process(), "this sampler (not billed)", False))
        return found

    def postgres(self) -> list[tuple[psutil.Process, str, bool]]:
        with self.pg.cursor() as cur:
            cur.execute("SELECT pid, datname, backend_type FROM pg_stat_activity")
            activity = cur.fetchall()
        found, postmaster = [], None
        for pid, datname, kind in activity:
            try:
                proc = psutil.Process(pid)
            except psutil.Error:
                continue
            if datname == self.dbname and pid not in self.exclude:
                found.append((proc, f"postgres: backends of {self.dbname}", True))
            elif kind in PG_BACKGROUND:
                found.append((proc, f"postgres: {kind} (shared, billed in full)", True))
                postmaster = postmaster or proc.parent()
            else:
                found.append((proc, "postgres: other databases' backends (not billed)", False))
        if postmaster is not None:
            found.append((postmaster, "postgres: postmaster (shared, billed in full)", True))
        return found

    def report(self) -> dict:
        elapsed = self.stopped - self.started
        for seen in self.tracked.values():
            self.rows[seen.label].cpu_s += max(0.0, seen.cpu1 - seen.cpu0)
        rows = [row_figures(r, elapsed) for r in self.rows.values()]
        rows.sort(key=lambda r: (not r["billed"], -r["cores"]))
        billed = [r for r in self.rows.values() if r.billed]
        totals = [[sum(v[k] for label, v in tick.items() if self.rows[label].billed)
                   for tick in self.ticks] for k in (0, 1)]  # billed rss, pss per sample
        listed_cpu = sum(r.cpu_s for r in self.rows.values())
        return {
            "window_s": round(elapsed, 1), "samples": len(self.ticks), "processes": rows,
            "billed": {
                "cores": round(sum(r.cpu_s for r in billed) / elapsed, 2),
                "pss_peak_gib": round(max(totals[1], default=0) / 2**30, 2),
                "pss_mean_gib": round(sum(totals[1]) / max(1, len(totals[1])) / 2**30, 2),
                "rss_peak_gib": round(max(totals[0], default=0) / 2**30, 2),
            },
            "machine_busy_cores": round((self.busy1 - self.busy0) / elapsed, 2),
            "unlisted_busy_cores": round((self.busy1 - self.busy0 - listed_cpu) / elapsed, 2),
        }


def row_figures(row: Row, elapsed: float) -> dict:
    return {
        "process": row.label, "billed": row.billed, "pids": len(row.pids),
        "cores": round(row.cpu_s / elapsed, 3), "cpu_s_per_min": round(row.cpu_s / elapsed * 60, 1),
        "rss_mean_mb": round(sum(row.rss) / max(1, len(row.rss)) / MB, 1),
        "rss_peak_mb": round(max(row.rss, default=0) / MB, 1),
        "pss_mean_mb": round(sum(row.pss) / max(1, len(row.pss)) / MB, 1),
        "pss_peak_mb": round(max(row.pss, default=0) / MB, 1),
    }


def machine_busy_s() -> float:
    """CPU seconds every core spent not idle since boot (all processes, all sessions)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)
