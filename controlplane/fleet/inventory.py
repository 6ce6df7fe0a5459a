"""Apply an agent's inventory to the fleet tables: GPUs and engines appear and disappear."""

from __future__ import annotations

import hashlib

import orjson
from django.db import transaction
from django.utils import timezone

from controlplane.fleet.models import Engine, Gpu, Host


class GpuOwnedElsewhere(Exception):
    def __init__(self, uuid: str, hostname: str, index: int) -> None:
        super().__init__(f"GPU {uuid} is registered to host {hostname}")
        self.uuid, self.hostname, self.index = uuid, hostname, index


def digest(inventory: dict) -> str:
    return hashlib.sha256(orjson.dumps(inventory, option=orjson.OPT_SORT_KEYS)).hexdigest()


@transaction.atomic
def apply_inventory(host_id: int, inventory: dict, agent_version: str = "") -> Host:
    host = Host.objects.select_for_update().get(pk=host_id)
    now = timezone.now()
    _apply_host(host, inventory, agent_version)
    _apply_gpus(host, inventory.get("gpus") or [], now)
    _apply_engines(host, inventory.get("engines") or [], now)
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
        raise GpuOwnedElsewhere(gpu.uuid, gpu.host.hostname, list(listed).index(gpu.uuid))
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


def _apply_engines(host: Host, engines: list[dict], now) -> None:
    existing = {e.name: e for e in Engine.objects.filter(host=host)}
    for item in engines:
        engine = existing.get(item["name"]) or Engine(host=host, name=item["name"], first_seen=now)
        engine.url = item.get("url") or ""
        engine.model = item.get("model") or ""
        engine.gpu_uuids = item.get("gpu_uuids") or []
        engine.config = item.get("config") or {}
        engine.simulated = bool(item.get("simulated"))
        engine.present = True
        engine.save()
    names = {e["name"] for e in engines}
    Engine.objects.filter(host=host, present=True).exclude(name__in=names).update(present=False)
