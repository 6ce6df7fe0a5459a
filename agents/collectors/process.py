"""The vLLM processes: which pids serve an engine, and proc.* samples for each of them.

vLLM V1 runs the API server and the EngineCore (and, with tensor parallelism, its workers) as
separate processes, so an engine is the process listening on its port plus all descendants.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import psutil

from agents.collectors import numa
from agents.collectors.base import Warn, WarnOnce, stderr_warn


@dataclass
class _Tracked:
    proc: Any  # psutil.Process, kept so cpu_times deltas span two collect() calls
    cpu_s: float | None = None
    wait_s: float | None = None  # run-queue delay of all its threads so far (schedstat)
    at: float | None = None


@dataclass
class _Found:
    expires: float
    listeners: list[Any]  # psutil.Process objects holding the listening socket
    members: dict[int, Any] = field(default_factory=dict)  # listeners and descendants


class ProcessCollector:
    def __init__(self, psutil_module: ModuleType | None = None, warn: Warn = stderr_warn,
                 sys_root: str = "/sys", clock: Callable[[], float] = time.monotonic,
                 cache_s: float = 5.0, proc_root: str = "/proc") -> None:
        self._ps: Any = psutil_module or psutil
        self._proc_root = proc_root
        self._warn = WarnOnce(warn)
        self._clock = clock
        self._cache_s = cache_s
        self._cpu_nodes = numa.node_map(sys_root, self._ps.cpu_count() or 0)
        self._tracked: dict[int, _Tracked] = {}
        self._found: dict[int, _Found] = {}
        # A process's command line, read once: psutil.Process compares pid and start time, so
        # a reused pid is read anew. None: it could not be read (and is not asked again).
        self._cmdlines: dict[Any, list[str] | None] = {}

    # -- which pids -------------------------------------------------------------------------

    def find_engine_pids(self, port: int) -> list[int]:
        """The process listening on this TCP port and all its descendants, sorted.

        Finding the listener walks every process's sockets, which is too costly to repeat
        each interval (the agent must stay under 1 % of a core): it is redone only when the
        listener died, or every 3 * cache_s while nothing listens (vLLM takes minutes to start,
        so a few seconds' delay costs nothing), and descendants are refreshed every cache_s.
        """
        now = self._clock()
        found = self._found.get(port)
        if (found is None or not all(self._alive(p) for p in found.listeners)
                or (not found.listeners and now >= found.expires)):
            listeners = self._listeners(port)
            found = _Found(now + self._cache_s * (1 if listeners else 3), listeners)
            found.members = self._with_descendants(found.listeners)
        elif now >= found.expires:
            found.expires = now + self._cache_s
            found.members = self._with_descendants(found.listeners)
        else:
            found.members = {pid: p for pid, p in found.members.items() if self._alive(p)}
        self._found[port] = found
        return sorted(found.members)

    def listener_commands(self, port: int) -> dict[int, list[str]]:
        """pid -> command line of each process listening on this port, as the last
        find_engine_pids(port) found them; those that cannot be read are left out."""
        found = self._found.get(port)
        listeners = found.listeners if found is not None else []
        live = {proc for found in self._found.values() for proc in found.listeners}
        for proc in self._cmdlines.keys() - live:
            del self._cmdlines[proc]
        commands = {}
        for proc in listeners:
            if proc not in self._cmdlines:
                self._cmdlines[proc] = self._cmdline(proc)
            if self._cmdlines[proc]:
                commands[proc.pid] = self._cmdlines[proc]
        return commands

    def _cmdline(self, proc: Any) -> list[str] | None:
        try:
            return [str(token) for token in proc.cmdline()]
        except self._ps.NoSuchProcess:  # gone (or a zombie): the next listener is read anew
            return None
        except self._ps.AccessDenied as exc:  # hardened /proc (hidepid): its flags stay unknown
            self._warn.fail(f"pid {proc.pid}", f"cannot read its command line: {exc!r}")
            return None

    def _listeners(self, port: int) -> list[Any]:
        try:
            conns = self._ps.net_connections(kind="tcp")
        except self._ps.AccessDenied:  # needs root on some systems (macOS, hardened /proc)
            return self._listeners_by_process(port)
        pids = {c.pid for c in conns if self._listens(c, port)}
        if pids == {None}:  # a listening socket we may not attribute: its owner is not ours
            return self._listeners_by_process(port)
        return self._processes(pid for pid in pids if pid is not None)

    def _listeners_by_process(self, port: int) -> list[Any]:
        found = []
        for proc in self._ps.process_iter():
            try:
                if any(self._listens(c, port) for c in proc.net_connections(kind="tcp")):
                    found.append(proc)
            except (self._ps.NoSuchProcess, self._ps.AccessDenied):
                continue  # gone, or not ours to read: it stays unknown
        if found:
            self._warn.ok(f"port {port}")
        else:
            self._warn.fail(f"port {port}", "no readable process listens on it; finding "
                            "the vLLM process needs root or the vLLM user")
        return found

    def _alive(self, proc: Any) -> bool:
        try:
            return bool(proc.is_running())
        except self._ps.Error:  # it raced away while we asked
            return False

    def _listens(self, conn: Any, port: int) -> bool:
        return conn.status == self._ps.CONN_LISTEN and bool(conn.laddr) and conn.laddr.port == port

    def _processes(self, pids: Any) -> list[Any]:
        procs = []
        for pid in sorted(pids):
            try:
                procs.append(self._ps.Process(pid))
            except self._ps.NoSuchProcess:
                continue
        return procs

    def _with_descendants(self, listeners: list[Any]) -> dict[int, Any]:
        members: dict[int, Any] = {}
        for proc in listeners:
            try:
                children = proc.children(recursive=True)
            except self._ps.NoSuchProcess:
                continue
            members[proc.pid] = proc
            members.update((child.pid, child) for child in children)
        return members

    # -- samples ----------------------------------------------------------------------------

    def collect(self, engine_pids: dict[str, list[int]],
                gpu_mem: dict[int, dict[str, int]]) -> list[dict[str, Any]]:
        """One dict per process; gpu_mem maps pid -> {GPU uuid: bytes} as NVML reported it."""
        now = self._clock()
        wanted = {pid for pids in engine_pids.values() for pid in pids}
        for pid in self._tracked.keys() - wanted:
            del self._tracked[pid]
        samples = []
        for engine, pids in engine_pids.items():
            for pid in pids:
                sample = self._sample(pid, now)
                if sample is None:
                    continue  # the process is gone: drop it without a word
                per_gpu = gpu_mem.get(pid)
                if per_gpu:  # no entry: it holds no GPU memory, or NVML could not say
                    sample["gpu_mem_bytes"] = sum(per_gpu.values())
                samples.append({"pid": pid, "engine": engine, **sample})
        return samples

    def _sample(self, pid: int, now: float) -> dict[str, Any] | None:
        try:
            tracked = self._track(pid)
            with tracked.proc.oneshot():
                values = self._read(tracked.proc)
        except self._ps.NoSuchProcess:
            self._tracked.pop(pid, None)
            return None
        cpu_s = values.pop("cpu_s", None)
        wait_s = run_delay_s(self._proc_root, pid)
        for key, total, before in (("cpu_pct", cpu_s, tracked.cpu_s),
                                   ("cpu_wait_pct", wait_s, tracked.wait_s)):
            pct = _share_pct(total, before, tracked.at, now)
            if pct is not None:
                values[key] = pct
        tracked.cpu_s, tracked.wait_s, tracked.at = cpu_s, wait_s, now
        return values

    def _track(self, pid: int) -> _Tracked:
        tracked = self._tracked.get(pid)
        # is_running() also compares the start time: a reused pid is a new process to prime.
        if tracked is None or not tracked.proc.is_running():
            tracked = self._tracked[pid] = _Tracked(self._ps.Process(pid))
        return tracked

    def _read(self, proc: Any) -> dict[str, Any]:
        values: dict[str, Any] = {}
        readers: dict[str, Callable[[], Any]] = {
            "cpu_s": lambda: _cpu_seconds(proc),
            "rss_bytes": lambda: int(proc.memory_info().rss),
            "threads": proc.num_threads,
            "cpu_affinity": lambda: sorted(proc.cpu_affinity()),
        }
        for key, read in readers.items():
            try:
                values[key] = read()
            except (self._ps.AccessDenied, AttributeError) as exc:
                # Not ours to read, or not on this OS (cpu_affinity): that field stays absent.
                self._warn.fail(f"pid {proc.pid}", f"cannot read {key}: {exc!r}")
        if "cpu_affinity" in values:
            values["numa_nodes"] = numa.nodes_of_cpus(values["cpu_affinity"], self._cpu_nodes)
        return values


def _share_pct(total: float | None, before: float | None, at: float | None,
               now: float) -> float | None:
    """Seconds of a cumulative total since the previous call as a share of the time between,
    100 = one core (or one thread) all the time; None on the priming call. A thread that
    exited takes its run delay with it: the difference is then clamped at 0."""
    if total is None or before is None or at is None or now <= at:
        return None
    return round(max(0.0, 100.0 * (total - before) / (now - at)), 2)


def run_delay_s(proc_root: str, pid: int) -> float | None:
    """Seconds the process's threads spent runnable but waiting for a CPU, summed over the
    threads alive now (Linux /proc/<pid>/task/<tid>/schedstat: run time, run delay, slices,
    in ns). CPU time alone cannot tell an engine loop starved by a busy neighbour on its core
    from one that has little to do: both use part of a core. None where the kernel has no
    schedstat (CONFIG_SCHED_INFO off) or the process is gone."""
    tasks = os.path.join(proc_root, str(pid), "task")
    try:
        tids = os.listdir(tasks)
    except OSError:
        return None
    total, read = 0, False
    for tid in tids:
        try:
            with open(os.path.join(tasks, tid, "schedstat"), "rb") as f:
                total += int(f.read().split()[1])
            read = True
        except (OSError, IndexError, ValueError):
            continue  # the thread exited between the listing and the read
    return total / 1e9 if read else None


def _cpu_seconds(proc: Any) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)  # children_* count only reaped children: not ours
