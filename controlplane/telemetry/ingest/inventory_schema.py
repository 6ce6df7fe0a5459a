"""Shape checks for the inventory an agent sends in ``host`` (docs/protocol.md).

Every number is checked against a range that fits its meaning (RANGES), as the samples' are
against the catalog: the inventory is stored and later read by the pages, the alert rules and
tuning, where an absurd value (a 400-digit memory size, a NUMA CPU list of lists) would fail
them for every host. The free-form config and mig objects: config_values.py. What placement
reads (labels, address, port_range, roles, hf_models) is checked against the bounds the
agent's command line enforces (agents/collectors/placement_facts.py): the address ends up in
the URLs a router calls, the labels in selectors.
"""

from __future__ import annotations

from agents.collectors import placement_facts as facts
from controlplane.telemetry.ingest.config_values import check_config, check_values
from controlplane.telemetry.ingest.errors import BadRequest, join

MAX_ITEMS = 1024
# CPU numbers 0-32767: NUMA nodes' CPUs here, processes' cpu_affinity (validate.py, columns.py)
MAX_CPUS = 32768

# field -> (type, required); "int?" allows null
HOST_FIELDS = {
    "hostname": (str, True), "simulated": (bool, False), "cpu_model": (str, False),
    "cpu_count": (int, False), "mem_total_bytes": (int, False), "numa_nodes": (list, False),
    "driver_version": (str, False), "gpus": (list, False), "engines": (list, False),
    "labels": (dict, False), "address": (str, False), "port_range": (list, False),
    "roles": (list, False), "hf_models": (list, False),
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
HF_MODEL_FIELDS = {"repo": (str, True), "bytes": (int, True)}
# Integer fields -> (lowest, highest) allowed.
RANGES = {
    "cpu_count": (1, MAX_CPUS),
    "mem_total_bytes": (0, 2**60),  # 1 EiB: more than any host or GPU holds
    "index": (0, MAX_ITEMS - 1),  # NVML's GPU index
    "numa_node": (-1, 1023),  # -1: the kernel does not know (Linux: at most 1,024 nodes)
    "id": (0, 1023),
    "engine_index": (0, 65535),
    "bytes": (0, facts.MAX_MODEL_BYTES),
}
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
    for i, node in enumerate(inventory.get("numa_nodes") or []):  # type: ignore[union-attr]
        _cpus(node["cpus"], f"{path}.numa_nodes[{i}].cpus")
    for i, gpu in enumerate(inventory.get("gpus") or []):  # type: ignore[union-attr]
        if gpu.get("mig") is not None:
            check_values(gpu["mig"], f"{path}.gpus[{i}].mig")
    for i, engine in enumerate(inventory.get("engines") or []):  # type: ignore[union-attr]
        uuids = engine.get("gpu_uuids") or []
        if len(uuids) > MAX_ITEMS or not all(isinstance(u, str) for u in uuids):
            raise BadRequest("gpu_uuids must be strings", f"{path}.engines[{i}].gpu_uuids")
        if engine.get("config") is not None:
            check_config(engine["config"], f"{path}.engines[{i}].config")
    _placement_facts(inventory, path)  # type: ignore[arg-type]


def _placement_facts(inventory: dict, path: str) -> None:
    _labels(inventory.get("labels") or {}, join(path, "labels"))
    address = inventory.get("address")
    if address is not None:
        problem = facts.address_problem(address)
        if problem:
            raise BadRequest(f"address {problem}", join(path, "address"))
    ports = inventory.get("port_range")
    if ports is not None:
        problem = (facts.port_range_problem(*ports) if len(ports) == 2
                   else "must be two ports [low, high]")
        if problem:
            raise BadRequest(f"port_range {problem}", join(path, "port_range"))
    _roles(inventory.get("roles") or [], join(path, "roles"))
    _hf_models(inventory.get("hf_models") or [], join(path, "hf_models"))


def _labels(labels: dict, path: str) -> None:
    if len(labels) > facts.MAX_LABELS:
        raise BadRequest(f"at most {facts.MAX_LABELS} labels", path)
    for key, value in labels.items():
        problem = facts.label_problem(key, value)
        if problem:
            raise BadRequest(problem, f"{path}.{key[:63]}")


def _roles(roles: list, path: str) -> None:
    if len(roles) > len(facts.ROLES):
        raise BadRequest(f"at most {len(facts.ROLES)} roles", path)
    for i, role in enumerate(roles):
        if role not in facts.ROLES:
            raise BadRequest(f"roles are {', '.join(facts.ROLES)}; not {str(role)[:40]!r}",
                             f"{path}[{i}]")
    if len(set(roles)) != len(roles):
        raise BadRequest("a role is listed twice", path)


def _hf_models(models: list, path: str) -> None:
    if len(models) > facts.MAX_HF_MODELS:
        raise BadRequest(f"at most {facts.MAX_HF_MODELS} models", path)
    seen = set()
    for i, model in enumerate(models):
        ipath = f"{path}[{i}]"
        _fields(model, HF_MODEL_FIELDS, ipath)
        repo = model["repo"]
        if not facts.HF_REPO.fullmatch(repo):
            raise BadRequest("repo must be a Hugging Face repository id, org/name",
                             join(ipath, "repo"))
        if repo in seen:
            raise BadRequest(f"{repo!r} is listed twice", join(ipath, "repo"))
        seen.add(repo)


def _cpus(cpus: list, path: str) -> None:
    if len(cpus) > MAX_CPUS:
        raise BadRequest(f"at most {MAX_CPUS} CPUs", path)
    for j, cpu in enumerate(cpus):
        if type(cpu) is not int or not 0 <= cpu < MAX_CPUS:
            raise BadRequest(f"cpus must be CPU numbers, integers 0-{MAX_CPUS - 1}",
                             f"{path}[{j}]")


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
        if type(value) is int and key in RANGES:
            low, high = RANGES[key]
            if not low <= value <= high:
                raise BadRequest(f"{key} must be from {low} to {high}, got {str(value)[:40]}",
                                 join(path, key))
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
