"""The fleet: hosts, their GPUs and vLLM engines, the deployments the agents run, and the
credentials the agents use."""

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
    # +1 whenever a deployment of the host changes: ingest replies with it, and an agent that
    # sees a new value fetches its desired config (docs/protocol.md).
    config_version = models.PositiveBigIntegerField(default=0)
    # key=value labels set through the API or the host page; the agent's own (--label, in its
    # inventory) are merged under them by all_labels().
    labels = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname

    def node_cpus(self) -> dict[int, list[int]]:
        """NUMA node id -> its CPUs, as the agent's inventory reported them, keeping whole
        numbers only: rows stored before ingest checked the layout may hold anything (a
        ``cpus`` of ``[[1]]`` once stopped the tuning pass)."""
        nodes: dict[int, list[int]] = {}
        for node in self.numa_nodes if isinstance(self.numa_nodes, list) else []:
            if isinstance(node, dict) and _whole(node.get("id")):
                cpus = node.get("cpus")
                nodes[node["id"]] = [c for c in cpus if _whole(c)] if isinstance(cpus, list) else []
        return nodes

    def agent_labels(self) -> dict[str, str]:
        """The labels the agent reported (``--label``), strings only."""
        labels = self.inventory.get("labels") if isinstance(self.inventory, dict) else None
        return {k: v for k, v in (labels or {}).items()
                if isinstance(k, str) and isinstance(v, str)} if isinstance(labels, dict) else {}

    def all_labels(self) -> dict[str, str]:
        """What a service's selector matches: the agent's labels, overridden by the ones set
        through the API or the host page."""
        own = self.labels if isinstance(self.labels, dict) else {}
        return {**self.agent_labels(), **{k: v for k, v in own.items() if isinstance(v, str)}}


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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


class TokenState(models.TextChoices):
    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


class BearerToken(models.Model):
    """What agent and API tokens share: a lookup id, the HMAC of the token (lib/tokens.py),
    and a life that ends at its expiry or its revocation."""

    KIND = ""  # the token's prefix letter: pw<KIND>_<lookup>_<secret>
    lookup = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)  # None: until revoked
    last_used_at = models.DateTimeField(null=True)
    revoked_at = models.DateTimeField(null=True)

    class Meta:
        abstract = True

    @property
    def prefix(self) -> str:
        """How the token starts, enough to recognise it: "pwu_3f9c2a1b_"."""
        return f"pw{self.KIND}_{self.lookup}_"

    @property
    def state(self) -> TokenState:
        if self.revoked_at is not None:
            return TokenState.REVOKED
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return TokenState.EXPIRED
        return TokenState.ACTIVE


class AgentToken(BearerToken):
    """A credential that can write telemetry for exactly one host."""

    KIND = "a"
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="agent_tokens")

    def __str__(self) -> str:
        return f"agent token {self.lookup} for {self.host_id}"


class TokenScope(models.TextChoices):
    READ = "read", "read-only"  # safe methods only, whatever the user may do
    WRITE = "write", "read-write"  # everything the user may do


class ApiToken(BearerToken):
    """A credential for the REST API acting as one user, with at most that user's rights."""

    KIND = "u"
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    scope = models.CharField(max_length=8, choices=TokenScope.choices, default=TokenScope.WRITE)

    def __str__(self) -> str:
        return f"api token {self.lookup} for {self.user_id}"


def engine_port(engine_name: str) -> int | None:
    """The port in an engine's name (``vllm:8000/0``), as the agent's vLLM collector names it
    (and ``Deployment.engine_name`` spells it); None for a name of another shape."""
    port = engine_name[5:].partition("/")[0] if engine_name.startswith("vllm:") else ""
    return int(port) if port.isdigit() else None


class DeploymentState(models.TextChoices):
    """What the host's agent reports of a deployment's process (agents/supervisor)."""

    UNKNOWN = "unknown"  # no report yet
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    CRASHED = "crashed"
    BACKING_OFF = "backing_off"
    STOPPED = "stopped"


class Deployment(models.Model):
    """A vLLM instance on one host, as the operator wants it (desired) and as the host's agent
    last reported it (reported). The desired half is versioned in ``DeploymentRevision``."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="deployments")
    name = models.SlugField(max_length=100)
    # desired
    enabled = models.BooleanField(default=True)  # False: the agent stops it
    model = models.CharField(max_length=300)
    port = models.PositiveIntegerField()
    gpu_indices = models.JSONField(default=list)
    vllm_version = models.CharField(max_length=32)
    args = models.JSONField(default=dict)  # vLLM arguments by dest name (agents/vllm_args.py)
    cpus = models.JSONField(null=True, blank=True)  # CPU ids to bind to; None: unbound
    numa_node = models.SmallIntegerField(null=True, blank=True)
    env = models.JSONField(default=dict, blank=True)
    drain_timeout_s = models.PositiveIntegerField(default=60)
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # reported by the agent
    state = models.CharField(max_length=16, choices=DeploymentState.choices,
                             default=DeploymentState.UNKNOWN)
    state_since = models.DateTimeField(null=True)
    reported_at = models.DateTimeField(null=True)
    running_revision = models.PositiveIntegerField(null=True)
    pid = models.PositiveIntegerField(null=True)
    restarts = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True)
    error = models.CharField(max_length=1000, blank=True)  # why it is not ready, if it is not
    next_start_at = models.DateTimeField(null=True)
    running_argv = models.JSONField(default=list)
    log_tail = models.JSONField(default=list)
    warnings = models.JSONField(default=list)
    # the phases of the running process's start, unix seconds, as the agent read them from
    # vLLM's log: {"process_start": t, "weights_loaded": t, "kv_profiled": t, ...}
    start_phases = models.JSONField(default=dict, blank=True)
    # owned by a service: a replica, changed only through its service
    service = models.ForeignKey("fleet.Service", null=True, blank=True,
                                on_delete=models.CASCADE, related_name="replica_set")
    replica = models.PositiveSmallIntegerField(null=True, blank=True)  # its slot, 0..n-1
    # the router sends it requests (Pitwall's decision, routing.py) and why not, when not
    in_rotation = models.BooleanField(default=False)
    rotation_note = models.CharField(max_length=300, blank=True)
    placement_reason = models.CharField(max_length=1000, blank=True)

    class Meta:
        ordering = ["host_id", "name"]
        permissions = [
            # trust_remote_code, plugins, middleware, templates from paths, loader variables:
            # code of the deployer's choosing runs on the GPU host (docs/security.md).
            ("deploy_code", "Can deploy arguments that load code"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["host", "name"], name="deployment_unique_name"),
            models.UniqueConstraint(fields=["host", "port"], name="deployment_unique_port"),
        ]

    def __str__(self) -> str:
        return f"{self.name} on host {self.host_id}"

    @property
    def engine_name(self) -> str:
        """The name the agent's vLLM collector gives the first engine of this deployment."""
        return f"vllm:{self.port}/0"


class DeploymentRevision(models.Model):
    """One version of a deployment's desired config: who changed what, when and why."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE,
                                   related_name="revisions")
    revision = models.PositiveIntegerField()
    config = models.JSONField()  # the desired half as it was (deployments.desired_config)
    changed = models.JSONField(default=list)  # the fields that differ from the revision before
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                               on_delete=models.SET_NULL, related_name="+")
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["deployment_id", "-revision"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "revision"],
                                    name="deployment_revision_unique"),
        ]

    def __str__(self) -> str:
        return f"revision {self.revision} of deployment {self.deployment_id}"


from controlplane.fleet.service_models import (  # noqa: E402  (Django finds models here)
    Rollout,
    RolloutState,
    RolloutStrategy,
    RouterPolicy,
    ScaleDecision,
    ScaleState,
    ScalingMode,
    Service,
    ServiceEvent,
    ServiceEventKind,
    ServiceRevision,
)

__all__ = ["AgentToken", "ApiToken", "Deployment", "DeploymentRevision", "DeploymentState",
           "Engine", "Gpu", "Host", "Rollout", "RolloutState", "RolloutStrategy",
           "ScaleDecision", "ScaleState", "ScalingMode",
           "RouterPolicy", "Service", "ServiceEvent", "ServiceEventKind", "ServiceRevision",
           "TokenScope", "TokenState", "engine_port"]
