"""Apply an agent's inventory to the fleet tables: GPUs and engines appear and disappear.

A GPU belongs to the first host that reported its UUID. Another host that reports the same UUID
has its whole inventory refused (403): the refusal does not name the holder (the agent, or
whoever holds its token, must not learn other hosts' names that way), and a warning names both
hosts in the log. A GPU that really moved is moved by an administrator with ``move_gpu``.

An engine runs on GPUs of its own host: ``gpu_uuids`` keeps only the UUIDs this inventory
lists as the host's GPUs. Another host's UUID there would put that host's GPUs on this
engine's page and in the export's ``model=`` filter.
"""

from __future__ import annotations

import hashlib
import logging

import orjson
from django.db import transaction
from django.utils import timezone

from controlplane.fleet.models import Engine, Gpu, Host

log = logging.getLogger(__name__)


class GpuOwnedElsewhere(Exception):
    """An inventory lists a GPU UUID that another host holds. The message names no host; the
    attributes (for the log) do: ``hostname`` holds it, ``claimant`` reported it."""

    def __init__(self, uuid: str, hostname: str, index: int, claimant: str = "") -> None:
        super().__init__(
            f"GPU {uuid} is registered to another host; if it moved here, an administrator "
            "must move it to this host (docs/security.md)")
        self.uuid, self.hostname, self.index, self.claimant = uuid, hostname, index, claimant


def digest(inventory: dict) -> str:
    return hashlib.sha256(orjson.dumps(inventory, option=orjson.OPT_SORT_KEYS)).hexdigest()


@transaction.atomic
def apply_inventory(host_id: int, inventory: dict, agent_version: str = "") -> Host:
    host = Host.objects.select_for_update().get(pk=host_id)
    now = timezone.now()
    _apply_host(host, inventory, agent_version)
    gpus = inventory.get("gpus") or []
    _apply_gpus(host, gpus, now)
    _apply_engines(host, inventory.get("engines") or [], {g["uuid"] for g in gpus}, now)
    return host


def _apply_host(host: Host, inventory: dict, agent_version: str) -> None:
    host.simulated = bool(inventory.get("simulated"))
    host.cpu_model = inventory.get("cpu_model") or ""
    host.cpu_count = inventory.get("cpu_count")
    host.mem_total_bytes = inventory.get("mem_total_bytes")
    host.numa_nodes = inventory.get("numa_nodes") or []
    host.driver_version = inventory.get("driver_version") or ""
    host.agent_version = agent_version or host.agent_version
    host.inventory = inventory
    host.inventory_digest = digest(inventory)
    host.save()


def _apply_gpus(host: Host, gpus: list[dict], now) -> None:
    listed = {g["uuid"]: g for g in gpus}
    taken = Gpu.objects.filter(uuid__in=listed).exclude(host=host).select_related("host")
    for gpu in taken:
        log.warning(
            "GPU UUID conflict: host %s (id %s) reported GPU %s, which is registered to host %s "
            "(id %s, %s); its inventory was refused. If the GPU moved, move it: "
            "controlplane.fleet.inventory.move_gpu(%r, %r); if not, revoke that host's tokens",
            host.hostname, host.id, gpu.uuid, gpu.host.hostname, gpu.host_id,
            "present there" if gpu.present else f"absent there since {gpu.removed_at}",
            gpu.uuid, host.hostname)
        raise GpuOwnedElsewhere(gpu.uuid, gpu.host.hostname, list(listed).index(gpu.uuid),
                                host.hostname)
    existing = {g.uuid: g for g in Gpu.objects.filter(host=host)}
    for uuid, item in listed.items():
        gpu = existing.get(uuid) or Gpu(host=host, uuid=uuid, first_seen=now)
        gpu.index = item["index"]
        gpu.name = item.get("name") or ""
        gpu.mem_total_bytes = item.get("mem_total_bytes")
        gpu.pci_bus_id = item.get("pci_bus_id") or ""
        gpu.numa_node = item.get("numa_node")
        gpu.mig = item.get("mig")
        gpu.simulated = bool(item.get("simulated"))
        gpu.present, gpu.removed_at = True, None
        gpu.save()
    gone = [uuid for uuid in existing if uuid not in listed]
    Gpu.objects.filter(host=host, uuid__in=gone, present=True).update(present=False, removed_at=now)


def _apply_engines(host: Host, engines: list[dict], own_gpus: set[str], now) -> None:
    existing = {e.name: e for e in Engine.objects.filter(host=host)}
    for item in engines:
        engine = existing.get(item["name"]) or Engine(host=host, name=item["name"], first_seen=now)
        engine.url = item.get("url") or ""
        engine.model = item.get("model") or ""
        engine.gpu_uuids = _own(host, item["name"], item.get("gpu_uuids") or [], own_gpus)
        engine.config = item.get("config") or {}
        engine.simulated = bool(item.get("simulated"))
        engine.present = True
        engine.save()
    names = {e["name"] for e in engines}
    Engine.objects.filter(host=host, present=True).exclude(name__in=names).update(present=False)


def _own(host: Host, engine: str, uuids: list[str], own_gpus: set[str]) -> list[str]:
    """The engine's GPU UUIDs that are this host's; the others are dropped, with a warning (an
    agent lists its engines' GPUs from its own NVML, so a foreign one is a bug or a lie)."""
    kept = [uuid for uuid in uuids if uuid in own_gpus]
    if len(kept) != len(uuids):
        log.warning("host %s (id %s) listed GPUs that are not its own for engine %r: %s; "
                    "dropped", host.hostname, host.id, engine,
                    sorted(set(uuids) - own_gpus)[:8])
    return kept


@transaction.atomic
def move_gpu(uuid: str, hostname: str) -> Gpu:
    """Give the GPU ``uuid`` (and its history) to host ``hostname``: for a GPU that really
    moved, or one a wrong host reported first. Raises Gpu.DoesNotExist / Host.DoesNotExist.

    The GPU stays marked absent until its new host's next inventory lists it. The old host's
    inventory digest is cleared, so if its agent still lists the GPU, its next inventory is
    checked again and refused. (A host that reported it wrongly: revoke its tokens too, which
    takes effect at its next batch.)
    """
    host = Host.objects.get(hostname=hostname)
    gpu = Gpu.objects.select_for_update().select_related("host").get(uuid=uuid)
    old = gpu.host
    if old.id == host.id:
        return gpu
    Host.objects.filter(pk=old.id).update(inventory_digest="")
    gpu.host, gpu.present, gpu.removed_at = host, False, gpu.removed_at or timezone.now()
    gpu.save(update_fields=["host", "present", "removed_at"])
    log.warning("GPU %s moved from host %s (id %s) to host %s (id %s)", uuid, old.hostname,
                old.id, host.hostname, host.id)
    return gpu
