"""Valid protocol-v1 bodies to start from, and row counts to check what was stored."""

from __future__ import annotations

import gzip
import time
import uuid

import orjson
from django.db import connection

from controlplane.telemetry.schema import TABLES


def inventory(hostname: str = "gpu-node-1", gpus: int = 2, engines=("vllm:8000/0",)) -> dict:
    return {
        "hostname": hostname, "cpu_model": "Test CPU", "cpu_count": 16,
        "mem_total_bytes": 64 * 2**30, "numa_nodes": [{"id": 0, "cpus": list(range(16))}],
        "gpus": [{"uuid": f"GPU-{hostname}-{i}", "index": i, "name": "NVIDIA H100 80GB HBM3",
                  "mem_total_bytes": 80 * 2**30, "pci_bus_id": f"00000000:{i:02x}:00.0",
                  "numa_node": 0, "mig": None} for i in range(gpus)],
        "engines": [{"name": name, "url": "http://127.0.0.1:8000/metrics",
                     "model": "meta-llama/Llama-3.1-8B-Instruct", "gpu_uuids": [],
                     "config": {"block_size": "16"}} for name in engines],
    }


def sample(ts: float | None = None, hostname: str = "gpu-node-1", gpus: int = 2) -> dict:
    return {
        "ts": ts if ts is not None else time.time(),
        "host": {"cpu_pct": 12.5, "cpu_core_pct": [10.0, 15.0], "load1": 0.7,
                 "mem_used_bytes": 2**33, "mem_total_bytes": 64 * 2**30},
        "gpus": [{"uuid": f"GPU-{hostname}-{i}", "util_pct": 90.0 + i, "mem_used_bytes": 2**36,
                  "mem_total_bytes": 80 * 2**30, "temp_c": 60} for i in range(gpus)],
        "engines": [{"name": "vllm:8000/0", "up": 1, "requests_running": 4,
                     "kv_cache_usage": 0.25,
                     "ttft_seconds": {"le": [0.1, 0.5, 1.0], "counts": [3, 2, 1, 0],
                                      "sum": 1.9}}],
        "processes": [{"pid": 4242, "engine": "vllm:8000/0", "cpu_pct": 99.0,
                       "rss_bytes": 2**30, "threads": 60, "cpu_affinity": [0, 1],
                       "numa_nodes": [0]}],
    }


def batch(seq: int = 1, boot_id: str | None = None, samples=None, with_inventory=True,
          **inventory_kwargs) -> dict:
    body = {"protocol": 1,
            "agent": {"version": "test", "boot_id": boot_id or str(uuid.uuid4()), "seq": seq},
            "samples": samples if samples is not None else [sample(
                hostname=inventory_kwargs.get("hostname", "gpu-node-1"),
                gpus=inventory_kwargs.get("gpus", 2))]}
    if with_inventory:
        body["host"] = inventory(**inventory_kwargs)
    return body


def gzipped(body: dict) -> bytes:
    return gzip.compress(orjson.dumps(body))


def stored_rows() -> dict[str, int]:
    with connection.cursor() as cursor:
        counts = {}
        for table in TABLES.values():
            cursor.execute(f"SELECT count(*) FROM {table.name}")
            counts[table.entity] = cursor.fetchone()[0]
    return counts


NOTHING = {"host": 0, "gpu": 0, "engine": 0, "proc": 0}


def raw_partitions() -> set[str]:
    """The names of the raw sample tables' partitions that exist."""
    from controlplane.telemetry import partitions

    with connection.cursor() as cursor:
        cursor.execute(partitions.EXISTING_SQL, [list(partitions.RAW_TABLES)])
        return {child for _, child in cursor.fetchall()}


def refused(ingest, body, token, status: int, field: str | None = None) -> dict:
    """Posts ``body``; asserts the answer's status (and the field it names); returns it."""
    code, reply = ingest.post(body, token)
    assert code == status, reply
    if field is not None:
        assert reply["field"] == field, reply
    return reply
