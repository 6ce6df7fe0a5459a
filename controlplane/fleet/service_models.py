"""Services: one model served by many replicas behind vLLM's router (docs/services.md).

A service's replicas are deployments it owns (``Deployment.service``); Pitwall places them
(``placement``), keeps the router's worker list equal to the routable ones (``routing``), rolls
changes through them (``rollouts``) and replaces the lost ones (``healing``). What happened is
kept as ``ServiceEvent`` rows: the service page's history and the alerts' source.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class RouterPolicy(models.TextChoices):
    """vllm-router's ``--policy`` choices that need no KV-event source."""

    ROUND_ROBIN = "round_robin"
    POWER_OF_TWO = "power_of_two"
    CACHE_AWARE = "cache_aware"
    RANDOM = "random"
    CONSISTENT_HASH = "consistent_hash"


class RolloutStrategy(models.TextChoices):
    ROLLING = "rolling"  # one replica after another, each checked briefly
    CANARY = "canary"  # one replica first, compared over a verification window


class ScalingMode(models.TextChoices):
    OFF = "off"  # the replica count is the operator's
    RECOMMEND = "recommend"  # decisions are recorded and shown, not taken
    AUTO = "auto"  # decisions are taken, within min_replicas..max_replicas


class Service(models.Model):
    """A model on ``replicas`` replicas, as the operator wants it. Versioned in
    ``ServiceRevision``; its replicas take the replica config (model, version, args, env,
    drain timeout) from it, and their host, GPUs, port and CPUs from placement."""

    name = models.SlugField(max_length=60, unique=True)
    # what each replica runs
    model = models.CharField(max_length=300)
    vllm_version = models.CharField(max_length=32)
    args = models.JSONField(default=dict)  # vLLM arguments by dest name; parallelism = GPUs
    env = models.JSONField(default=dict, blank=True)  # write-only values, as a deployment's
    drain_timeout_s = models.PositiveIntegerField(default=60)
    # how many and where
    replicas = models.PositiveSmallIntegerField(default=1)
    selector = models.JSONField(default=dict, blank=True)  # host labels: {"pool": "online"}
    gpu_model = models.CharField(max_length=120, blank=True)  # a substring of the GPU's name
    # the router (an agent run with the router role serves it)
    router_host = models.ForeignKey("fleet.Host", null=True, blank=True,
                                    on_delete=models.SET_NULL, related_name="routed_services")
    router_port = models.PositiveIntegerField(default=9000)
    router_policy = models.CharField(max_length=24, choices=RouterPolicy.choices,
                                     default=RouterPolicy.POWER_OF_TWO)
    # how changes roll
    strategy = models.CharField(max_length=12, choices=RolloutStrategy.choices,
                                default=RolloutStrategy.ROLLING)
    max_unavailable = models.PositiveSmallIntegerField(default=1)
    max_surge = models.PositiveSmallIntegerField(default=1)  # used where spare GPUs allow
    canary_window_s = models.PositiveIntegerField(default=600)
    # how the replica count follows demand (docs/autoscaling.md)
    scaling_mode = models.CharField(max_length=10, choices=ScalingMode.choices,
                                    default=ScalingMode.OFF)
    min_replicas = models.PositiveSmallIntegerField(default=1)
    max_replicas = models.PositiveSmallIntegerField(default=1)
    scaling = models.JSONField(default=dict, blank=True)  # thresholds over the defaults
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # Pitwall's own state
    placement = models.JSONField(default=dict)  # the last placement decision, with reasons
    unplaced = models.PositiveSmallIntegerField(default=0)  # replicas no host could take
    router_status = models.JSONField(default=dict)  # the router agent's last report
    router_reported_at = models.DateTimeField(null=True)
    scaling_minute = models.DateTimeField(null=True)  # the last whole minute judged

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ServiceRevision(models.Model):
    """One version of a service's desired config: who changed what, when and why."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="revisions")
    revision = models.PositiveIntegerField()
    config = models.JSONField()  # env values redacted, as a deployment revision's
    changed = models.JSONField(default=list)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                               on_delete=models.SET_NULL, related_name="+")
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["service_id", "-revision"]
        constraints = [models.UniqueConstraint(fields=["service", "revision"],
                                               name="service_revision_unique")]

    def __str__(self) -> str:
        return f"revision {self.revision} of service {self.service_id}"


class RolloutState(models.TextChoices):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    ROLLED_BACK = "rolled_back"  # a replica failed or regressed: every changed one went back
    SUPERSEDED = "superseded"  # a newer change started its own rollout


class Rollout(models.Model):
    """A service change going through its replicas, one step at a time (``rollouts``)."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="rollouts")
    from_revision = models.PositiveIntegerField()
    to_revision = models.PositiveIntegerField()
    strategy = models.CharField(max_length=12, choices=RolloutStrategy.choices)
    state = models.CharField(max_length=12, choices=RolloutState.choices,
                             default=RolloutState.RUNNING)
    # the replica in hand and where it is: out_of_router, draining, starting, checking ...
    phase = models.CharField(max_length=24, blank=True)
    current = models.ForeignKey("fleet.Deployment", null=True, blank=True,
                                on_delete=models.SET_NULL, related_name="+")
    phase_since = models.DateTimeField(null=True)
    done = models.JSONField(default=list)  # ids of the replicas changed so far
    detail = models.TextField(blank=True)  # why it stopped, for a rollback
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"rollout {self.from_revision}->{self.to_revision} of {self.service_id}"


class ServiceEventKind(models.TextChoices):
    PLACED = "placed"
    UNPLACED = "unplaced"
    OUT_OF_ROTATION = "out_of_rotation"
    INTO_ROTATION = "into_rotation"
    ROLLOUT_STARTED = "rollout_started"
    REPLICA_CHANGED = "replica_changed"
    ROLLOUT_SUCCEEDED = "rollout_succeeded"
    ROLLED_BACK = "rolled_back"
    HEALED = "healed"


class ServiceEvent(models.Model):
    """What Pitwall did to a service and why: the service page's history; rollbacks, heals and
    unplaced replicas are also alerted."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=24, choices=ServiceEventKind.choices)
    deployment = models.ForeignKey("fleet.Deployment", null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    message = models.TextField()
    data = models.JSONField(default=dict, blank=True)  # figures behind the message

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["service", "-at"], name="service_event_recent")]

    def __str__(self) -> str:
        return f"{self.kind} of service {self.service_id} at {self.at}"


class ScaleState(models.TextChoices):
    RECOMMENDED = "recommended"  # recommend mode: shown, not taken
    HELD = "held"  # a reason to scale held back (a bound, a cool-down) or a config's case
    IN_FLIGHT = "in_flight"  # taken: the replica is being added, or drained and removed
    DONE = "done"
    FAILED = "failed"  # the step did not complete (no host fitted, the replica never ready)


class ScaleDecision(models.Model):
    """One autoscaling decision with its evidence, taken or only recommended: the service
    page's and the API's record of why the replica count moved, or did not."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE,
                                related_name="scale_decisions")
    at = models.DateTimeField(default=timezone.now)
    mode = models.CharField(max_length=10, choices=ScalingMode.choices)
    direction = models.CharField(max_length=8)  # scaling_policy.Direction
    replicas_before = models.PositiveSmallIntegerField()
    replicas_after = models.PositiveSmallIntegerField()
    reason = models.TextField()
    evidence = models.JSONField(default=list)  # each figure over its window, its threshold
    state = models.CharField(max_length=12, choices=ScaleState.choices)
    # the replica added or removed, and where placement put an added one and why
    deployment = models.ForeignKey("fleet.Deployment", null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    placement = models.JSONField(default=dict, blank=True)
    ready_s = models.FloatField(null=True)  # decision to serving traffic, for a scale-out
    ended_at = models.DateTimeField(null=True)
    detail = models.TextField(blank=True)  # why a step failed

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["service", "-at"], name="scale_decision_recent")]

    def __str__(self) -> str:
        return f"scale {self.direction} of service {self.service_id} at {self.at}"
