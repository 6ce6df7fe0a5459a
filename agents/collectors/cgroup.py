"""cgroup v2 CPU bandwidth: the quota (cores available) and how often it throttled.

Only cgroup v2 (the "0::/path" line of /proc/<pid>/cgroup). A v1-only or hybrid host without
the cpu controller on the unified tree has no figures here, so the metric is absent.

Where throttling is counted: the kernel counts nr_periods / nr_throttled in the cgroup that
carries the quota (cpu.max). Without a quota CFS bandwidth control is off, nr_periods never
moves, and a throttled share would be a meaningless 0, so it is absent. The quota may sit on an
ancestor (a Kubernetes pod slice, a systemd slice) rather than on the process's own cgroup, so
we walk up to the nearest cgroup that has one.
"""

from __future__ import annotations

import os
from pathlib import Path

from agents.collectors.base import Warn, WarnOnce, stderr_warn

CpuStat = dict[str, int]


def cgroup_path(pid: int | str = "self", proc_root: str = "/proc") -> str | None:
    """The v2 cgroup path of a process ("/system.slice/x.service"), or None if it has none."""
    try:
        text = Path(proc_root, str(pid), "cgroup").read_text()
    except FileNotFoundError:  # the process is gone, or a kernel without cgroups
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def cgroup_dir(pid: int | str = "self", proc_root: str = "/proc",
               cgroup_root: str = "/sys/fs/cgroup") -> Path | None:
    """The directory of a process's v2 cgroup under cgroup_root, or None."""
    rel = cgroup_path(pid, proc_root)
    if rel is None:
        return None
    root = Path(cgroup_root)
    # normpath: a pid in another cgroup namespace shows as "/../../other"; stay under the root.
    leaf = Path(os.path.normpath(root / rel.lstrip("/")))
    if leaf.is_dir() and leaf.is_relative_to(root):
        return leaf
    # In a container without its own cgroup namespace the path names the host's hierarchy,
    # while cgroup_root is the container's own cgroup: the root is then the right directory.
    return root if root.is_dir() else None


def _chain(leaf: Path, root: Path) -> list[Path]:
    """leaf, its parent, ..., up to and including root."""
    chain = [leaf]
    while chain[-1] != root and chain[-1].is_relative_to(root) and chain[-1] != chain[-1].parent:
        chain.append(chain[-1].parent)
    return chain


def read_cpu_max(directory: Path) -> float | None:
    """cpu.max as cores ("200000 100000" -> 2.0); None for "max" or when the file is absent."""
    try:
        fields = (directory / "cpu.max").read_text().split()
    except FileNotFoundError:  # the cpu controller is not enabled for this cgroup
        return None
    if not fields or fields[0] == "max":
        return None
    period = int(fields[1]) if len(fields) > 1 else 100_000  # the kernel's default period
    return int(fields[0]) / period


def read_cpu_stat(directory: Path) -> CpuStat:
    """cpu.stat as {key: int}. Raises OSError / ValueError when it cannot be read or parsed."""
    stat: CpuStat = {}
    for line in (directory / "cpu.stat").read_text().splitlines():
        if line.strip():
            key, value = line.split()
            stat[key] = int(value)
    return stat


def quota_dir(leaf: Path, root: Path) -> Path | None:
    """The nearest cgroup, leaf or ancestor, that carries a CPU quota."""
    return next((d for d in _chain(leaf, root) if read_cpu_max(d) is not None), None)


def cpu_limit_cores(leaf: Path, root: Path) -> float | None:
    """Cores available to the cgroup: the tightest quota on the way to the root, or None."""
    limits = [c for c in (read_cpu_max(d) for d in _chain(leaf, root)) if c is not None]
    return min(limits) if limits else None


class CgroupThrottle:
    """host.cpu_throttled_pct for one process's cgroup (the agent's own by default)."""

    source = "cgroup"

    def __init__(self, pid: int | str = "self", proc_root: str = "/proc",
                 cgroup_root: str = "/sys/fs/cgroup", warn: Warn = stderr_warn) -> None:
        self._warn = WarnOnce(warn)
        self._root = Path(cgroup_root)
        self._leaf: Path | None = None
        self._stat_dir: Path | None = None
        self._prev: CpuStat | None = None
        try:
            self._leaf = cgroup_dir(pid, proc_root, cgroup_root)
            if self._leaf is not None:
                self._stat_dir = quota_dir(self._leaf, self._root)
        except (OSError, ValueError) as exc:
            self._warn.fail(self.source, f"cannot read the cgroup of {pid}: {exc}")

    def limit_cores(self) -> float | None:
        if self._leaf is None:
            return None
        try:
            return cpu_limit_cores(self._leaf, self._root)
        except (OSError, ValueError) as exc:
            self._warn.fail(self.source, f"cannot read cpu.max: {exc}")
            return None

    def collect(self) -> dict[str, float]:
        if self._stat_dir is None:
            return {}
        try:
            stat = read_cpu_stat(self._stat_dir)
        except (OSError, ValueError) as exc:
            self._warn.fail(self.source, f"cannot read {self._stat_dir / 'cpu.stat'}: {exc}")
            self._prev = None
            return {}
        self._warn.ok(self.source)
        prev, self._prev = self._prev, stat
        return _throttled(prev, stat)


def _throttled(prev: CpuStat | None, cur: CpuStat) -> dict[str, float]:
    if prev is None or "nr_periods" not in cur or "nr_periods" not in prev:
        return {}  # first reading primes; no bandwidth fields means no figure to give
    periods = cur["nr_periods"] - prev["nr_periods"]
    throttled = cur.get("nr_throttled", 0) - prev.get("nr_throttled", 0)
    if periods < 0 or throttled < 0:
        return {}  # the cgroup was recreated and its counters restarted: skip this interval
    if periods == 0:
        return {"cpu_throttled_pct": 0.0}  # a quota is set but nothing ran: nothing throttled
    return {"cpu_throttled_pct": min(100.0, 100.0 * throttled / periods)}
