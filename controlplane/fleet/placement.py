"""Placement: which hosts, GPUs, CPUs and port a service's replicas take, and why.

``place(need, hosts)`` is pure (no database): the benchmark runs it over a thousand simulated
hosts, and ``hosts_for(service)`` is the one place that reads the fleet into ``HostView``s, in
a fixed number of queries whatever the fleet's size.

The rules, in the order they refuse a host:

- a host the caller avoids (healing: where the lost replica was), an offline host, a host
  whose labels do not match the service's ``selector``;
- kind of host: a replica's GPU count is its world size (tensor x pipeline x data parallel).
  A host that never reported a GPU runs vLLM's CPU build and takes a replica with no GPUs,
  but only for a service whose selector admits no GPU host at all (a CPU pool, or a fleet of
  CPU machines such as the real-vLLM demo): a GPU service never spills onto CPU machines.
  Several replicas may share a CPU host (each on its own port), spreading still prefers
  other hosts; their CPUs are left unbound (vLLM's CPU build binds its own threads);
- GPUs: a GPU is free when no enabled deployment holds it, it is present and not lost, its
  name contains ``gpu_model`` (case-insensitive) when one is set, and its memory fits:
  vLLM takes ``gpu_memory_utilization`` of the GPU's total at start, so that share must fit
  beside what other processes hold (``mem_foreign``), and it must hold the weights' share
  per GPU (``mem_per_gpu``, when known). A replica takes all of its GPUs or none, on one
  NUMA node where one node has enough free (the fullest such node, to keep whole nodes for
  larger replicas), else across nodes;
- CPUs: its share of the NUMA node's CPUs not bound by another deployment (the node's CPUs x
  its GPUs / the node's GPUs; a replica across nodes: each node's share for its GPUs there),
  None (unbound) where the host reports no NUMA layout or every CPU is bound already;
- port: the lowest in the host's ``port_range`` that no deployment and no router uses.

Among the hosts that can take a replica: the fewest replicas of the service on the host,
then in its zone (the ``spread_key`` label), then the weights already in the host's Hugging
Face cache, then one NUMA node, then the host with the fewest free GPUs (best fit), then the
host name. Replicas are placed one at a time, each seeing the ones before it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from controlplane.fleet.deployments import world_size
from controlplane.fleet.models import Deployment, Engine, Gpu, Host, Service, engine_port
from controlplane.fleet.queries import is_online
from controlplane.telemetry.latest import latest_process_samples, latest_samples

GIB = 1024**3
GB = 10**9
DEFAULT_PORT_RANGE = (8000, 8999)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default
# The weights' share of a GPU times this must fit in vLLM's share of it: activations, the
# CUDA context and a few KV blocks need room beside the weights.
WEIGHTS_MARGIN = 1.2
MAX_DETAILS = 3  # GPU problems named in one skipped host's reason
MAX_SKIPPED_SHOWN = 100  # hosts listed in a stored placement; the rest are counted


@dataclass(frozen=True)
class GpuView:
    index: int
    name: str
    mem_total: int | None
    mem_foreign: int  # bytes held by processes that are not this deployment's (telemetry)
    numa_node: int | None
    present: bool
    lost: bool


@dataclass(frozen=True)
class HostView:
    id: int
    hostname: str
    online: bool
    labels: dict[str, str]
    gpus: tuple[GpuView, ...]
    taken_gpus: frozenset[int]
    taken_ports: frozenset[int]
    port_range: tuple[int, int]
    node_cpus: dict[int, list[int]]
    taken_cpus: frozenset[int]
    cached_models: dict[str, int]
    cpu_only: bool


@dataclass(frozen=True)
class Need:
    model: str
    gpus: int
    mem_per_gpu: int | None
    selector: dict
    gpu_model: str
    count: int
    spread_key: str = "zone"
    avoid_hosts: frozenset[int] = frozenset()
    already: tuple[int, ...] = ()  # host ids the service's other replicas hold (spreading)
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION


@dataclass(frozen=True)
class Slot:
    host_id: int
    hostname: str
    gpu_indices: list[int]
    numa_node: int | None
    cpus: list[int] | None
    port: int
    reason: str


@dataclass
class Placement:
    slots: list[Slot]
    skipped: dict[str, str]  # hostname -> why it took no (more) replica
    unplaced: int
    wanted: int = 0

    def as_json(self) -> dict:
        """What ``Service.placement`` stores and the pages show: every slot, the first
        ``MAX_SKIPPED_SHOWN`` skipped hosts by name and how many more."""
        names = sorted(self.skipped)
        shown = {name: self.skipped[name] for name in names[:MAX_SKIPPED_SHOWN]}
        return {"wanted": self.wanted, "placed": len(self.slots), "unplaced": self.unplaced,
                "slots": [asdict(s) for s in self.slots], "skipped": shown,
                "skipped_more": max(0, len(names) - MAX_SKIPPED_SHOWN),
                "summary": self.summary()}

    def summary(self) -> str:
        """One line: "placed 2 of 2 replicas: a, b" or "unplaced: 2 of 4 replicas: host a:
        offline; host b: ..." (at most ``MAX_DETAILS`` hosts named)."""
        if not self.unplaced:
            return (f"placed {len(self.slots)} of {self.wanted} replicas: "
                    f"{', '.join(s.hostname for s in self.slots)}")
        names = sorted(self.skipped)
        why = "; ".join(f"host {n}: {self.skipped[n]}" for n in names[:MAX_DETAILS])
        more = (f"; and {_plural(len(names) - MAX_DETAILS, 'more host')}"
                if len(names) > MAX_DETAILS else "")
        return (f"unplaced: {self.unplaced} of {self.wanted} replicas: "
                f"{why or 'no host in the fleet'}{more}")


# -- place ------------------------------------------------------------------------------------


def place(need: Need, hosts: list[HostView]) -> Placement:
    """Slots for ``need.count`` replicas; the hosts that could take none, and why."""
    by_id = {h.id: h for h in hosts}
    cpu_service = need.gpus == 0 or not any(
        not h.cpu_only for h in hosts if not _label_mismatch(need.selector, h.labels))
    skipped: dict[str, str] = {}
    candidates: list[_Candidate] = []
    for host in hosts:
        refusal = _host_refusal(need, host, cpu_service)
        if refusal:
            skipped[host.hostname] = refusal
        else:
            candidates.append(_Candidate(need, host, cpu_service))
    on_host = Counter(need.already)
    in_zone = Counter(_zone(by_id[h], need.spread_key) for h in need.already if h in by_id)
    slots: list[Slot] = []
    for _ in range(need.count):
        best = _best(candidates, on_host, in_zone, need.spread_key)
        if best is None:
            break
        slots.append(best.take(on_host[best.host.id]))
        on_host[best.host.id] += 1
        in_zone[best.zone] += 1
    # A host that took replicas is named too when some are left over: why it took no more.
    placed_on = set() if len(slots) < need.count else {s.host_id for s in slots}
    for c in candidates:
        if c.host.id not in placed_on and c.refusal:
            skipped[c.host.hostname] = c.refusal
    return Placement(slots, skipped, need.count - len(slots), need.count)


def _best(candidates: list[_Candidate], on_host: Counter, in_zone: Counter,
          spread_key: str) -> _Candidate | None:
    best, best_key = None, None
    for c in candidates:
        if c.alloc is None:
            continue
        key = (on_host[c.host.id], in_zone[c.zone], c.uncached, c.alloc.split, c.free_left,
               c.host.hostname)
        if best_key is None or key < best_key:
            best, best_key = c, key
    return best


def _zone(host: HostView, spread_key: str) -> str:
    return host.labels.get(spread_key, "")


def _host_refusal(need: Need, host: HostView, cpu_service: bool) -> str:
    if host.id in need.avoid_hosts:
        return "avoided: the replica being replaced was here"
    if not host.online:
        return "offline"
    if mismatch := _label_mismatch(need.selector, host.labels):
        return f"labels: {mismatch}"
    if host.cpu_only and not cpu_service:
        return ("no GPUs (vLLM's CPU build): it takes only a service whose selector admits "
                "no GPU host")
    if not host.cpu_only and cpu_service:
        return "has GPUs: this service runs vLLM's CPU build"
    if need.gpu_model and not host.cpu_only and not any(
            _named(g, need.gpu_model) for g in host.gpus if g.present):
        names = Counter(_short(g.name) for g in host.gpus if g.present)
        held = ", ".join(f"{n} {name}" for name, n in sorted(names.items())) or "none present"
        return f"no GPU named like {need.gpu_model!r} (it has {held})"
    return ""


def _label_mismatch(selector: dict, labels: dict[str, str]) -> str:
    """"pool=batch, not pool=online" for each selector entry the labels do not match."""
    wrong = []
    for key, value in selector.items():
        if labels.get(key) != value:
            held = f"{key}={labels[key]}" if key in labels else f"no {key}"
            wrong.append(f"{held}, not {key}={value}")
    return "; ".join(wrong)


def _named(gpu: GpuView, gpu_model: str) -> bool:
    return gpu_model.lower() in gpu.name.lower()


def _short(name: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "H100": the model as people say it."""
    words = [w for w in name.split() if w not in ("NVIDIA", "Tesla", "GeForce")]
    return words[0] if words else (name or "GPU")


@dataclass
class _Alloc:
    gpus: list[int]
    numa_node: int | None
    split: int  # 0: on one NUMA node (or none reported); 1: across nodes


@dataclass
class _Candidate:
    """A host that may take replicas, with what it has left as replicas are placed."""

    need: Need
    host: HostView
    cpu_service: bool
    zone: str = ""
    uncached: int = 1
    free: set[int] = field(default_factory=set)  # GPUs that fit the need and are free
    problems: list[str] = field(default_factory=list)  # GPUs that do not fit, and why
    in_use: list[int] = field(default_factory=list)  # GPUs deployments hold
    placed: list[int] = field(default_factory=list)  # GPUs this placement gave replicas
    taken_cpus: set[int] = field(default_factory=set)
    taken_ports: set[int] = field(default_factory=set)
    alloc: _Alloc | None = None
    refusal: str = ""  # why it cannot take (another) replica

    def __post_init__(self) -> None:
        self.zone = _zone(self.host, self.need.spread_key)
        self.uncached = 0 if self.need.model in self.host.cached_models else 1
        self.taken_cpus = set(self.host.taken_cpus)
        self.taken_ports = set(self.host.taken_ports)
        if not self.cpu_service:
            self._sort_gpus()
        self._allocate()

    @property
    def free_left(self) -> int:
        return len(self.free)

    def _sort_gpus(self) -> None:
        for gpu in self.host.gpus:
            problem = _gpu_health(gpu)
            if not problem and gpu.index in self.host.taken_gpus:
                self.in_use.append(gpu.index)
                continue
            problem = problem or _gpu_fit(gpu, self.need)
            if problem:
                self.problems.append(problem)
            else:
                self.free.add(gpu.index)

    def _details(self) -> str:
        held = [f"{_gpus(gpus)} {what}"
                for gpus, what in ((self.in_use, "in use"),
                                   (self.placed, "taken by this placement")) if gpus]
        return "; ".join([*held, *self.problems][:MAX_DETAILS])

    def _allocate(self) -> None:
        port = self._port()
        if port is None:
            lo, hi = self.host.port_range
            self.alloc, self.refusal = None, f"no free port in {lo}-{hi}"
            return
        if self.cpu_service:
            self.alloc, self.refusal = _Alloc([], None, 0), ""
            return
        self.alloc = _gpus_for(self.need.gpus, self.free, self.host)
        if self.alloc is None:
            free, need = len(self.free), self.need.gpus
            details = self._details()
            self.refusal = (f"{_plural(free, 'free GPU')}, needs {need}"
                            + (f": {details}" if details else ""))

    def _port(self) -> int | None:
        lo, hi = self.host.port_range
        return next((p for p in range(lo, hi + 1) if p not in self.taken_ports), None)

    def take(self, replicas_here: int) -> Slot:
        alloc, port = self.alloc, self._port()
        assert alloc is not None and port is not None  # _best chose a host that fits
        cpus = None if self.cpu_service else self._cpus(alloc)
        self.free -= set(alloc.gpus)
        self.taken_ports.add(port)
        self.taken_cpus |= set(cpus or [])
        slot = Slot(self.host.id, self.host.hostname, alloc.gpus, alloc.numa_node, cpus, port,
                    self._reason(alloc, cpus, port, replicas_here))
        self.placed += alloc.gpus
        self._allocate()
        return slot

    def _cpus(self, alloc: _Alloc) -> list[int] | None:
        """Each node's share for the replica's GPUs on it (the node's CPUs x those GPUs / the
        node's GPUs), from the CPUs no deployment binds; None where a GPU's node is unknown
        or nothing is left."""
        node_of = {g.index: g.numa_node for g in self.host.gpus}
        nodes = Counter(node_of.get(i) for i in alloc.gpus)
        if any(node not in self.host.node_cpus for node in nodes):
            return None
        taken: list[int] = []
        for node, count in sorted(nodes.items()):
            on_node = sum(1 for g in self.host.gpus if g.present and g.numa_node == node)
            cpus = self.host.node_cpus[node]
            share = max(1, len(cpus) * count // max(on_node, 1))
            taken += [c for c in cpus if c not in self.taken_cpus][:share]
        return taken or None

    def _reason(self, alloc: _Alloc, cpus: list[int] | None, port: int,
                replicas_here: int) -> str:
        host = self.host
        if self.cpu_service:
            what = "no GPUs (vLLM's CPU build)"
        else:
            names = {_short(g.name) for g in host.gpus if g.index in alloc.gpus}
            where = (f"on NUMA {alloc.numa_node}" if alloc.numa_node is not None
                     else "across NUMA nodes" if alloc.split else "no NUMA node reported")
            what = (f"{len(alloc.gpus)} free {'/'.join(sorted(names))} {where} "
                    f"({_gpus(alloc.gpus)})")
        parts = [what, f"CPUs {_ranges(cpus)}" if cpus else "CPUs unbound", f"port {port}"]
        size = host.cached_models.get(self.need.model)
        parts.append(f"weights cached ({size / GB:.1f} GB)" if size is not None
                     else "weights not cached")
        if self.zone:
            parts.append(f"{self.need.spread_key} {self.zone}")
        if replicas_here:
            parts.append(f"{_plural(replicas_here, 'other replica')} of the service here")
        return f"host {host.hostname}: {', '.join(parts)}"


def _gpu_health(gpu: GpuView) -> str:
    if not gpu.present:
        return f"GPU {gpu.index} gone from the inventory"
    if gpu.lost:
        return f"GPU {gpu.index} lost (NVML: fallen off the bus)"
    return ""


def _gpu_fit(gpu: GpuView, need: Need) -> str:
    """Why this free GPU cannot hold one of the need's GPUs; "" when it can."""
    if need.gpu_model and not _named(gpu, need.gpu_model):
        return f"GPU {gpu.index} is a {_short(gpu.name)}, not {need.gpu_model}"
    total = gpu.mem_total
    if not total:
        return ""  # memory unknown: any free GPU fits
    share = need.gpu_memory_utilization * total
    if share > total - gpu.mem_foreign:
        return (f"GPU {gpu.index} holds {gpu.mem_foreign / GIB:.1f} GiB of another process: "
                f"{need.gpu_memory_utilization:g} of {total / GIB:.0f} GiB does not fit "
                f"beside it")
    if need.mem_per_gpu is not None and need.mem_per_gpu > share:
        return (f"GPU {gpu.index}: {need.gpu_memory_utilization:g} of {total / GIB:.0f} GiB "
                f"({share / GIB:.1f} GiB) cannot hold {need.mem_per_gpu / GIB:.1f} GiB of "
                f"weights per GPU")
    return ""


def _gpus_for(count: int, free: set[int], host: HostView) -> _Alloc | None:
    """All ``count`` GPUs or None: on the fullest NUMA node with enough free, else across."""
    if len(free) < count:
        return None
    node_of = {g.index: g.numa_node for g in host.gpus}
    by_node: dict[int | None, list[int]] = {}
    for index in sorted(free):
        by_node.setdefault(node_of.get(index), []).append(index)
    fitting = [(len(gpus), -1 if node is None else node, node)
               for node, gpus in by_node.items() if len(gpus) >= count]
    if fitting:
        node = min(fitting)[2]
        return _Alloc(by_node[node][:count], node, 0)
    taken: list[int] = []
    for gpus in sorted(by_node.values(), key=len, reverse=True):
        taken += gpus[:count - len(taken)]
    return _Alloc(sorted(taken), None, 1)


def _gpus(indices: list[int]) -> str:
    """"GPU 5", "GPUs 0-3"."""
    return f"GPU{'' if len(indices) == 1 else 's'} {_ranges(indices)}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _ranges(numbers: Iterable[int] | None) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    values = sorted(set(numbers or []))
    spans: list[str] = []
    start = prev = None
    for v in values:
        if prev is not None and v == prev + 1:
            prev = v
            continue
        if start is not None:
            spans.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = v
    if start is not None:
        spans.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(spans)


# -- the need of a service -----------------------------------------------------------------


def need_for(service, hosts: list[HostView], count: int, *, already: Iterable[int] = (),
             avoid_hosts: Iterable[int] = ()) -> Need:
    """What ``count`` more replicas of ``service`` need. GPUs per replica: the world size of
    its arguments. Memory per GPU: the weights' size (the largest any host's Hugging Face
    cache reports for the model) over tensor x pipeline parallel, times ``WEIGHTS_MARGIN``;
    None where no host has the model cached (any free GPU fits)."""
    args = service.args if isinstance(service.args, dict) else {}
    sizes = [h.cached_models[service.model] for h in hosts if service.model in h.cached_models]
    shards = _positive(args.get("tensor_parallel_size")) * _positive(
        args.get("pipeline_parallel_size"))
    per_gpu = math.ceil(max(sizes) / shards * WEIGHTS_MARGIN) if sizes else None
    gmu = args.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION)
    gmu = float(gmu) if isinstance(gmu, int | float) and not isinstance(gmu, bool) and (
        0 < gmu <= 1) else DEFAULT_GPU_MEMORY_UTILIZATION
    return Need(model=service.model, gpus=world_size(args), mem_per_gpu=per_gpu,
                selector=dict(service.selector or {}), gpu_model=service.gpu_model or "",
                count=count, avoid_hosts=frozenset(avoid_hosts), already=tuple(already),
                gpu_memory_utilization=gmu)


def _positive(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


# -- the fleet as placement sees it ---------------------------------------------------------


def hosts_for(service, exclude_deployments: Iterable = ()) -> list[HostView]:
    """Every host as placement sees it, in a fixed number of queries whatever the fleet's
    size: the hosts, their GPUs, the deployments and routers holding GPUs, CPUs and ports, the
    GPUs' newest samples, and the processes of the excluded deployments' hosts.

    ``exclude_deployments`` (deployments or ids) hold nothing: the GPUs, CPUs and port of a
    replica being moved are free, and the GPU memory their engines use is not foreign.
    ``service`` may be None; its own replicas are held like any deployment's."""
    excluded = {getattr(d, "pk", d) for d in exclude_deployments}
    hosts = list(Host.objects.only("id", "hostname", "last_seen", "labels", "inventory",
                                   "numa_nodes").order_by("hostname"))
    gpus_of: dict[int, list] = {}
    for gpu in Gpu.objects.order_by("host_id", "index"):
        gpus_of.setdefault(gpu.host_id, []).append(gpu)
    held = _Holdings()
    for row in Deployment.objects.values_list("id", "host_id", "enabled", "gpu_indices",
                                              "cpus", "port"):
        held.add(*row, excluded=row[0] in excluded)
    for host_id, port in Service.objects.filter(router_host__isnull=False).values_list(
            "router_host_id", "router_port"):
        held.ports.setdefault(host_id, set()).add(port)
    foreign = _foreign_memory(gpus_of, held)
    return [HostView(
        id=host.id, hostname=host.hostname, online=is_online(host.last_seen),
        labels=host.all_labels(),
        gpus=tuple(_gpu_view(g, foreign) for g in gpus_of.get(host.id, [])),
        taken_gpus=frozenset(held.gpus.get(host.id, ())),
        taken_ports=frozenset(held.ports.get(host.id, ())),
        port_range=port_range(host.inventory), node_cpus=host.node_cpus(),
        taken_cpus=frozenset(held.cpus.get(host.id, ())),
        cached_models=cached_models(host.inventory), cpu_only=not gpus_of.get(host.id))
        for host in hosts]


@dataclass
class _Holdings:
    """What the deployments hold, by host id; the excluded ones' GPUs, by (host, index)."""

    gpus: dict[int, set[int]] = field(default_factory=dict)
    cpus: dict[int, set[int]] = field(default_factory=dict)
    ports: dict[int, set[int]] = field(default_factory=dict)
    moving: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)

    def add(self, deployment_id: int, host_id: int, enabled: bool, gpus, cpus, port: int, *,
            excluded: bool) -> None:
        gpus = [i for i in gpus or [] if isinstance(i, int)]
        if excluded:
            # Its engines' memory is not foreign on the GPUs it leaves (port: for the engine).
            self.moving.update(((host_id, i), (deployment_id, port)) for i in gpus)
            return
        # Every row holds its port (unique per host, enabled or not); only enabled ones
        # hold GPUs and CPUs, as deployments.check counts them.
        self.ports.setdefault(host_id, set()).add(port)
        if enabled:
            self.gpus.setdefault(host_id, set()).update(gpus)
            self.cpus.setdefault(host_id, set()).update(
                c for c in cpus or [] if isinstance(c, int))


def _foreign_memory(gpus_of: dict[int, list], held: _Holdings) -> dict[int, tuple[int, bool]]:
    """Gpu id -> (bytes other processes hold, lost) from each GPU's newest sample. A free
    GPU's used memory is all foreign; on a GPU an excluded deployment leaves, what its
    engines' processes use is taken off (all of it where no process row tells: no other
    deployment may hold that GPU); 0 on a GPU a deployment holds (it is not free anyway)."""
    free = {g.id: g for gpus in gpus_of.values() for g in gpus
            if g.present and g.index not in held.gpus.get(g.host_id, ())}
    newest = latest_samples("gpu", list(free))
    ours = _moving_engine_memory(gpus_of, held)
    result: dict[int, tuple[int, bool]] = {}
    for gpu_id, gpu in free.items():
        row = newest.get(gpu_id, {})
        used = int(row.get("mem_used_bytes") or 0)
        if (gpu.host_id, gpu.index) in held.moving:
            used = max(0, used - ours[gpu.uuid]) if gpu.uuid in ours else 0
        result[gpu_id] = (used, bool(row.get("lost")))
    return result


def _moving_engine_memory(gpus_of: dict[int, list], held: _Holdings) -> dict[str, int]:
    """GPU uuid -> bytes the excluded deployments' engine processes use on it, from each
    process's newest row (its GPU memory split evenly over its engine's GPUs)."""
    hosts = {host for host, _ in held.moving}
    ports = {(host, port) for (host, _), (_, port) in held.moving.items()}
    engines = {e.id: e.gpu_uuids for e in Engine.objects.filter(host_id__in=hosts)
               if (e.host_id, engine_port(e.name)) in ports and isinstance(e.gpu_uuids, list)}
    used: dict[str, int] = {}
    for host in hosts:  # the excluded deployments' hosts: a handful, not the fleet
        for proc in latest_process_samples(host):
            uuids = engines.get(proc.get("engine_id"))
            if uuids and proc.get("gpu_mem_bytes"):
                for uuid in uuids:
                    used[uuid] = used.get(uuid, 0) + int(proc["gpu_mem_bytes"] / len(uuids))
    return used


def _gpu_view(gpu, foreign: dict[int, tuple[int, bool]]) -> GpuView:
    mem_foreign, lost = foreign.get(gpu.id, (0, False))
    return GpuView(index=gpu.index, name=gpu.name, mem_total=gpu.mem_total_bytes,
                   mem_foreign=mem_foreign, numa_node=gpu.numa_node, present=gpu.present,
                   lost=lost)


def port_range(inventory: object) -> tuple[int, int]:
    """The ports the host gives replicas (inventory ``port_range``), else 8000-8999."""
    ports = inventory.get("port_range") if isinstance(inventory, dict) else None
    if (isinstance(ports, list) and len(ports) == 2
            and all(isinstance(p, int) and not isinstance(p, bool) for p in ports)
            and 1024 <= ports[0] <= ports[1] <= 65535):
        return ports[0], ports[1]
    return DEFAULT_PORT_RANGE


def cached_models(inventory: object) -> dict[str, int]:
    """Repo -> bytes of the models in the host's Hugging Face cache (inventory ``hf_models``)."""
    models = inventory.get("hf_models") if isinstance(inventory, dict) else None
    cached: dict[str, int] = {}
    for item in models if isinstance(models, list) else []:
        repo = item.get("repo") if isinstance(item, dict) else None
        size = item.get("bytes") if isinstance(item, dict) else None
        if isinstance(repo, str) and isinstance(size, int) and not isinstance(size, bool):
            cached[repo] = size
    return cached


def roles(inventory: object) -> list[str]:
    """What the host's agent serves beside deployments (inventory ``roles``: "router")."""
    held = inventory.get("roles") if isinstance(inventory, dict) else None
    return [r for r in held if isinstance(r, str)] if isinstance(held, list) else []
