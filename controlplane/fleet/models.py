"""The fleet: hosts, their GPUs and vLLM engines, and the credentials their agents use."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Host(models.Model):
    # 32-bit ids: they are repeated in every sample row, where 4 bytes a row add up.
    id = models.AutoField(primary_key=True)
    hostname = models.CharField(max_length=253, unique=True)
    simulated = models.BooleanField(default=False)
    cpu_model = models.CharField(max_length=200, blank=True)
    cpu_count = models.PositiveIntegerField(null=True)
    mem_total_bytes = models.BigIntegerField(null=True)
    numa_nodes = models.JSONField(default=list)  # [{"id": 0, "cpus": [...]}, ...]
    agent_version = models.CharField(max_length=50, blank=True)
    driver_version = models.CharField(max_length=50, blank=True)
    inventory = models.JSONField(default=dict)  # the last inventory as the agent sent it
    inventory_digest = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(null=True)  # refreshed by ingest at most every few s
    spool_evicted_batches = models.BigIntegerField(default=0)
    spool_evicted_samples = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname


class Gpu(models.Model):
    id = models.AutoField(primary_key=True)
    uuid = models.CharField(max_length=96, unique=True)
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=120, blank=True)
    mem_total_bytes = models.BigIntegerField(null=True)
    pci_bus_id = models.CharField(max_length=32, blank=True)
    numa_node = models.SmallIntegerField(null=True)
    mig = models.JSONField(null=True)
    simulated = models.BooleanField(default=False)
    # False once the GPU is missing from the host's inventory; its history stays.
    present = models.BooleanField(default=True)
    first_seen = models.DateTimeField(default=timezone.now)
    removed_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["host_id", "index", "uuid"]

    def __str__(self) -> str:
        return f"{self.host_id}/{self.index} {self.uuid}"


class Engine(models.Model):
    """One vLLM engine (one data-parallel rank of one vLLM server) on a host."""

    id = models.AutoField(primary_key=True)
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="engines")
    name = models.CharField(max_length=200)  # "vllm:8000/0": port and data-parallel rank
    url = models.CharField(max_length=500, blank=True)
    model = models.CharField(max_length=300, blank=True)
    gpu_uuids = models.JSONField(default=list)
    config = models.JSONField(default=dict)  # cache_config_info and the flags in effect
    simulated = models.BooleanField(default=False)
    present = models.BooleanField(default=True)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(null=True)

    class Meta:
        ordering = ["host_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["host", "name"], name="engine_unique_per_host")
        ]

    def __str__(self) -> str:
        return f"{self.host_id}:{self.name}"


class AgentToken(models.Model):
    """A credential that can write telemetry for exactly one host."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="agent_tokens")
    lookup = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"agent token {self.lookup} for {self.host_id}"


class ApiToken(models.Model):
    """A credential for the REST API acting as one user."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    lookup = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True)
    revoked_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"api token {self.lookup} for {self.user_id}"
