"""Shape checks for the inventory an agent sends in ``host`` (docs/protocol.md)."""

from __future__ import annotations

from controlplane.telemetry.ingest.errors import BadRequest, join

MAX_ITEMS = 1024

# field -> (type, required); "int?" allows null
HOST_FIELDS = {
    "hostname": (str, True), "simulated": (bool, False), "cpu_model": (str, False),
    "cpu_count": (int, False), "mem_total_bytes": (int, False), "numa_nodes": (list, False),
    "driver_version": (str, False), "gpus": (list, False), "engines": (list, False),
}
GPU_FIELDS = {
    "uuid": (str, True), "index": (int, True), "name": (str, False),
    "mem_total_bytes": (int, False), "pci_bus_id": (str, False), "numa_node": ("int?", False),
    "mig": ("dict?", False), "simulated": (bool, False),
}
ENGINE_FIELDS = {
    "name": (str, True), "url": (str, False), "model": (str, False), "gpu_uuids": (list, False),
    "config": (dict, False), "simulated": (bool, False), "engine_index": ("int?", False),
}
NUMA_FIELDS = {"id": (int, True), "cpus": (list, True)}
NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list",
         dict: "an object", "int?": "an integer or null", "dict?": "an object or null"}


def check_inventory(inventory: object, path: str) -> None:
    _fields(inventory, HOST_FIELDS, path)
    hostname = inventory["hostname"]  # type: ignore[index]
    if not 0 < len(hostname) <= 253:
        raise BadRequest("hostname must be 1 to 253 characters", join(path, "hostname"))
    for key, fields in (("gpus", GPU_FIELDS), ("engines", ENGINE_FIELDS),
                        ("numa_nodes", NUMA_FIELDS)):
        items = inventory.get(key) or []  # type: ignore[union-attr]
        if len(items) > MAX_ITEMS:
            raise BadRequest(f"at most {MAX_ITEMS} items", join(path, key))
        seen = set()
        for i, item in enumerate(items):
            ipath = f"{join(path, key)}[{i}]"
            _fields(item, fields, ipath)
            ident = item.get("uuid", item.get("name", item.get("id")))
            if ident in seen:
                raise BadRequest(f"{ident!r} is listed twice", ipath)
            seen.add(ident)
    for i, engine in enumerate(inventory.get("engines") or []):  # type: ignore[union-attr]
        uuids = engine.get("gpu_uuids") or []
        if not all(isinstance(u, str) for u in uuids):
            raise BadRequest("gpu_uuids must be strings", f"{path}.engines[{i}].gpu_uuids")


def _fields(item: object, fields: dict, path: str) -> None:
    if not isinstance(item, dict):
        raise BadRequest("must be an object", path)
    for key, (kind, required) in fields.items():
        value = item.get(key)
        if value is None:
            if required:
                raise BadRequest(f"{key} is required", join(path, key))
            continue
        if not _is(value, kind):
            raise BadRequest(f"{key} must be {NAMES[kind]}", join(path, key))
        if isinstance(value, str) and len(value) > 500:
            raise BadRequest(f"{key} is too long (500 characters at most)", join(path, key))


def _is(value: object, kind: object) -> bool:
    if kind == "int?":
        kind = int
    elif kind == "dict?":
        kind = dict
    if kind is int:
        return type(value) is int
    return isinstance(value, kind)  # type: ignore[arg-type]
