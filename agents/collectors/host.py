"""The host: inventory (CPU model, cores, memory, NUMA) and host.* samples from psutil.

The inventory also carries what placement needs of the host (HostFacts): the operator's
labels, the address other hosts reach its servers at, the ports replicas may take, its roles,
and the models in its Hugging Face cache (hf_cache.py).

Rates (CPU busy share, network and disk bytes/s) come from counter deltas between two
collect() calls, over the monotonic clock: the first call only primes them, so it returns no
rate keys rather than a made-up figure.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from agents.collectors import numa
from agents.collectors.base import Warn, WarnOnce, stderr_warn
from agents.collectors.cgroup import CgroupThrottle
from agents.collectors.hf_cache import HfCache
from agents.collectors.placement_facts import DEFAULT_PORT_RANGE, clean_labels, default_address

Counters = dict[str, int]
_NOT_BUSY = ("idle", "iowait")  # what psutil.cpu_percent also counts as not busy
_GUEST = ("guest", "guest_nice")  # already included in user / nice on Linux: not twice
ADDRESS_EVERY_S = 300.0


@dataclass(frozen=True)
class HostFacts:
    """What the operator says of this host for placement (flags, checked at start)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    address: str | None = None  # --advertise-address; None: found from the route to server
    server: str | None = None  # the control plane's URL, whose route gives the address
    port_range: tuple[int, int] = DEFAULT_PORT_RANGE
    roles: tuple[str, ...] = ()

    def inventory(self, default: str | None) -> dict[str, Any]:
        """``default``: the address found when no --advertise-address was given."""
        inv: dict[str, Any] = {"labels": clean_labels(self.labels),
                               "port_range": list(self.port_range), "roles": list(self.roles)}
        address = self.address or default
        if address:
            inv["address"] = address
        return inv


class HostCollector:
    def __init__(self, psutil_module: ModuleType | None = None, proc_root: str = "/proc",
                 sys_root: str = "/sys", cgroup_root: str = "/sys/fs/cgroup",
                 warn: Warn = stderr_warn,
                 clock: Callable[[], float] = time.monotonic,
                 facts: HostFacts | None = None, hf_cache: HfCache | None = None) -> None:
        self._ps: Any = psutil_module or psutil
        self._facts = facts
        self._hf_cache = hf_cache
        self._address: str | None = None  # the default address, found at most every
        self._address_read_at: float | None = None  # ADDRESS_EVERY_S
        self._proc_root = proc_root
        self._sys_root = sys_root
        self._warn = WarnOnce(warn)
        self._clock = clock
        self._throttle = CgroupThrottle("self", proc_root, cgroup_root, warn)
        self._nic_counted: dict[str, bool] = {}  # NIC name -> not loopback
        self._disk_counted: dict[str, bool] = {}  # block device name -> a whole disk
        self._prev_time: float | None = None
        self._prev: dict[str, Any] = {}  # source -> its last counters

    # -- inventory -------------------------------------------------------------------------

    def inventory(self) -> dict[str, Any]:
        cpu_count = self._ps.cpu_count(logical=True) or 0
        inv: dict[str, Any] = {
            "hostname": socket.gethostname(),
            "cpu_count": cpu_count,
            "mem_total_bytes": int(self._ps.virtual_memory().total),
            "numa_nodes": [{"id": node, "cpus": cpus} for node, cpus
                           in numa.node_map(self._sys_root, cpu_count).items()],
        }
        model = self._cpu_model()
        if model:
            inv["cpu_model"] = model
        limit = self._throttle.limit_cores()
        if limit is not None:
            inv["cgroup_cpu_limit"] = limit
        if self._facts is not None:
            inv.update(self._facts.inventory(self._default_address(inv["hostname"])))
        if self._hf_cache is not None:
            inv["hf_models"] = self._hf_cache.models()
        return inv

    def _default_address(self, hostname: str) -> str | None:
        # Found again now and then: a host that changed networks reports its new address.
        # Not at every inventory: a server name resolves through DNS, which may hang for
        # seconds while it is down, and the inventory is read on the sampling loop.
        facts, now = self._facts, self._clock()
        if facts is None or facts.address:
            return None
        if self._address_read_at is None or now - self._address_read_at >= ADDRESS_EVERY_S:
            self._address = default_address(facts.server, hostname)
            self._address_read_at = now
        return self._address

    def _cpu_model(self) -> str | None:
        # x86 says "model name"; many ARM kernels have no such line, so the model stays unknown.
        try:
            with open(Path(self._proc_root, "cpuinfo")) as cpuinfo:
                for line in cpuinfo:
                    key, _, value = line.partition(":")
                    if key.strip() == "model name":
                        return value.strip() or None
        except OSError as exc:
            self._warn.fail("host.cpuinfo", str(exc))
        return None

    # -- samples ---------------------------------------------------------------------------

    def collect(self) -> dict[str, Any]:
        now = self._clock()
        dt = None if self._prev_time is None else now - self._prev_time
        self._prev_time = now
        out: dict[str, Any] = {}
        for source, read in (("host.cpu", self._cpu), ("host.load", self._load),
                             ("host.memory", self._memory), ("host.net", self._net),
                             ("host.disk", self._disk)):
            try:
                out.update(read(dt))
            except Exception as exc:  # one failing source must not stop the rest
                self._prev.pop(source, None)
                self._warn.fail(source, f"{type(exc).__name__}: {exc}")
            else:
                self._warn.ok(source)
        out.update(self._throttle.collect())
        return out

    def _cpu(self, dt: float | None) -> dict[str, Any]:
        cur = [_busy_total(t) for t in self._ps.cpu_times(percpu=True)]
        prev = self._prev.get("host.cpu")
        self._prev["host.cpu"] = cur
        if prev is None or len(prev) != len(cur):
            return {}  # first call, or a CPU came or went: prime again
        cores = [_busy_pct(p, c) for p, c in zip(prev, cur, strict=True)]
        total = _busy_pct((sum(p[0] for p in prev), sum(p[1] for p in prev)),
                          (sum(c[0] for c in cur), sum(c[1] for c in cur)))
        return {"cpu_pct": total, "cpu_core_pct": cores}

    def _load(self, dt: float | None) -> dict[str, Any]:
        return {"load1": float(self._ps.getloadavg()[0])}

    def _memory(self, dt: float | None) -> dict[str, Any]:
        vm = self._ps.virtual_memory()
        return {"mem_used_bytes": int(vm.total - vm.available), "mem_total_bytes": int(vm.total),
                "swap_used_bytes": int(self._ps.swap_memory().used)}

    def _net(self, dt: float | None) -> dict[str, Any]:
        counters = self._ps.net_io_counters(pernic=True)
        if counters.keys() - self._nic_counted.keys():
            stats = self._ps.net_if_stats()  # one call for all the new NICs
            _select(self._nic_counted, counters, lambda nic: not _is_loopback(nic, stats))
        nics = {name: c for name, c in counters.items() if self._nic_counted.get(name)}
        return self._rates("host.net", dt, {
            "net_rx_bps": {name: c.bytes_recv for name, c in nics.items()},
            "net_tx_bps": {name: c.bytes_sent for name, c in nics.items()},
        })

    def _disk(self, dt: float | None) -> dict[str, Any]:
        counters = self._ps.disk_io_counters(perdisk=True) or {}
        _select(self._disk_counted, counters, self._is_whole_disk)
        disks = {name: c for name, c in counters.items() if self._disk_counted[name]}
        return self._rates("host.disk", dt, {
            "disk_read_bps": {name: c.read_bytes for name, c in disks.items()},
            "disk_write_bps": {name: c.write_bytes for name, c in disks.items()},
        })

    def _rates(self, source: str, dt: float | None,
               counters: dict[str, Counters]) -> dict[str, float]:
        prev = self._prev.get(source)
        self._prev[source] = counters
        if prev is None or not dt or dt <= 0:
            return {}
        out = {}
        for key, cur in counters.items():
            rate = counter_rate(prev.get(key, {}), cur, dt)
            if rate is not None:
                out[key] = rate
        return out

    def _is_whole_disk(self, name: str) -> bool:
        # Partitions are not in /sys/block, and only hardware disks have a "device" link there:
        # loop, zram, dm-* and md* sit on top of real disks and would count their bytes twice.
        return Path(self._sys_root, "block", name.replace("/", "!"), "device").exists()


def _select(cache: dict[str, bool], names: Iterable[str], test: Callable[[str], bool]) -> None:
    """Ask test() once per name, and forget names that left (container veths come and go)."""
    fresh = {name: cache[name] if name in cache else test(name) for name in names}
    cache.clear()
    cache.update(fresh)


def _is_loopback(nic: str, stats: dict[str, Any]) -> bool:
    flags = getattr(stats.get(nic), "flags", "")  # psutil >= 5.9.3 reports interface flags
    return nic == "lo" or "loopback" in flags.split(",")


def counter_rate(prev: Counters, cur: Counters, dt: float) -> float | None:
    """Sum of per-item counter deltas over dt, in units per second.

    An item seen for the first time, or whose counter went backwards (a reset: driver reload,
    a NIC re-created), is left out of this interval. None when no item gave a delta.
    """
    deltas = [cur[k] - prev[k] for k in cur.keys() & prev.keys() if cur[k] >= prev[k]]
    return sum(deltas) / dt if deltas else None


def _busy_total(times: Any) -> tuple[float, float]:
    fields = times._asdict()
    total = sum(fields.values()) - sum(fields.get(f, 0.0) for f in _GUEST)
    return total - sum(fields.get(f, 0.0) for f in _NOT_BUSY), total


def _busy_pct(prev: tuple[float, float], cur: tuple[float, float]) -> float:
    elapsed = cur[1] - prev[1]
    if elapsed <= 0:
        return 0.0
    return round(min(100.0, max(0.0, 100.0 * (cur[0] - prev[0]) / elapsed)), 2)
