"""The entities a series request names: by id or name (``entity=``), or all of a host's."""

from __future__ import annotations

from dataclasses import dataclass

from agents.protocol import Metric
from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.telemetry.packing.read import any_row_sql
from controlplane.telemetry.series.errors import EntityNotFound, SeriesError
from controlplane.telemetry.series.sqlbits import fetch

_INT4_MAX = 2**31 - 1


@dataclass(frozen=True)
class EntityRef:
    kind: str
    keys: tuple[int, ...]  # values of the sample table's key columns, in their order
    info: dict[str, object]  # what a reply says about the entity


def resolve_entities(metric: Metric, texts: list[str]) -> list[EntityRef]:
    """The entities of the metric's kind these texts name, once each, in the order given."""
    found: dict[tuple[int, ...], EntityRef] = {}
    for text in texts:
        ref = resolve_entity(metric, text)
        found.setdefault(ref.keys, ref)
    return list(found.values())


def resolve_entity(metric: Metric, text: str) -> EntityRef:
    """The entity of the metric's kind that ``text`` names (see each resolver for the forms)."""
    return _RESOLVERS[metric.entity](text.strip())


def find_host(text: str, param: str = "host") -> Host:
    host = _by_id_or(Host.objects.all(), text.strip(), "hostname")
    if host is None:
        raise EntityNotFound(param, f"no host with id or hostname {text.strip()!r}")
    return host


def host_entities(metric: Metric, host: Host) -> list[EntityRef]:
    """The host itself, its present GPUs in index order, or its present engines by id.

    Processes are known only through their samples: see ``proc_ref`` and the series reader.
    """
    if metric.entity == "host":
        return [_host_ref(host)]
    if metric.entity == "gpu":
        gpus = Gpu.objects.filter(host=host, present=True).order_by("index", "id")
        return [_gpu_ref(gpu, host) for gpu in gpus]
    if metric.entity == "engine":
        engines = Engine.objects.filter(host=host, present=True).order_by("id")
        return [_engine_ref(engine, host) for engine in engines]
    raise ValueError(metric.entity)


def proc_ref(host: Host, pid: int) -> EntityRef:
    return EntityRef("proc", (host.id, pid), {"kind": "proc", "host": host.id,
                                              "hostname": host.hostname, "pid": pid})


def _is_id(text: str) -> bool:
    return text.isascii() and text.isdigit() and int(text) <= _INT4_MAX


def _by_id_or(queryset, text: str, field: str):
    """By id when ``text`` is one, else (or when no id matches) by ``field``."""
    found = queryset.filter(pk=int(text)).first() if _is_id(text) else None
    return found or queryset.filter(**{field: text}).first()


def _host_ref(host: Host) -> EntityRef:
    return EntityRef("host", (host.id,), {"kind": "host", "id": host.id,
                                          "hostname": host.hostname})


def _gpu_ref(gpu: Gpu, host: Host) -> EntityRef:
    return EntityRef("gpu", (gpu.id,), {
        "kind": "gpu", "id": gpu.id, "uuid": gpu.uuid, "index": gpu.index,
        "host": host.id, "hostname": host.hostname})


def _engine_ref(engine: Engine, host: Host) -> EntityRef:
    return EntityRef("engine", (engine.id,), {
        "kind": "engine", "id": engine.id, "name": engine.name,
        "host": host.id, "hostname": host.hostname})


def _host(text: str) -> EntityRef:
    return _host_ref(find_host(text, "entity"))


def _gpu(text: str) -> EntityRef:
    gpu = _by_id_or(Gpu.objects.select_related("host"), text, "uuid")
    if gpu is None:
        raise EntityNotFound("entity", f"no GPU with id or uuid {text!r}")
    return _gpu_ref(gpu, gpu.host)


def _engine(text: str) -> EntityRef:
    if not _is_id(text):
        raise SeriesError("entity", f"an engine is named by its id, an integer, not {text!r}")
    engine = Engine.objects.select_related("host").filter(pk=int(text)).first()
    if engine is None:
        raise EntityNotFound("entity", f"no engine with id {text}")
    return _engine_ref(engine, engine.host)


def _proc(text: str) -> EntityRef:
    host_text, sep, pid_text = text.rpartition(":")
    if not sep or not host_text or not _is_id(pid_text):
        raise SeriesError("entity", f"a process is named '<host id or hostname>:<pid>', "
                                    f"not {text!r}")
    host = find_host(host_text, "entity")
    pid = int(pid_text)
    # A pid is only known through its samples: none at all means no such process.
    found = fetch(any_row_sql("proc", "host_id = %s AND pid = %s"), [host.id, pid] * 2)
    if not found[0][0]:
        raise EntityNotFound("entity", f"no process {pid} on host {host.hostname}")
    return proc_ref(host, pid)


_RESOLVERS = {"host": _host, "gpu": _gpu, "engine": _engine, "proc": _proc}
