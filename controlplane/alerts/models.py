"""Alert rules, the alert state of each (rule, target), its history, silences."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Severity(models.TextChoices):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class RuleKind(models.TextChoices):
    # A catalog metric aggregated over a window and compared with a threshold.
    THRESHOLD = "threshold"
    # Named conditions with their own SQL (controlplane/alerts/named_kinds.py).
    HOST_NO_DATA = "host_no_data", "agent stopped reporting"
    ENGINE_DOWN = "engine_down", "engine down or silent while its host reports"
    KV_PRESSURE = "kv_pressure", "KV cache full with requests waiting"
    MEMORY_BEYOND_SHARE = "memory_beyond_share", "GPU memory beyond the engines' share"
    CPU_BOUND_ENGINE = "cpu_bound_engine", "engine process pinned at a core, GPUs idle"
    ENGINE_STALLED = "engine_stalled", "engine holds requests but makes no progress"
    GPU_LOST = "gpu_lost", "GPU gone from the inventory or lost to NVML"
    OBJECTIVE_ATTAINMENT = "objective_attainment", "share of requests within the objective"
    ERROR_BUDGET_BURN = "error_budget_burn", "error budget burn rate (short and long window)"
    SERVICE_DISRUPTED = "service_disrupted", "service rolled back, healed or left unplaced"


class Aggregation(models.TextChoices):
    AVG = "avg"
    MIN = "min"
    MAX = "max"
    LAST = "last"
    RATE = "rate"  # (last - first) / seconds between them: counters kept as gauges
    QUANTILE = "quantile"  # histogram metrics only, from the buckets summed over the window


class Op(models.TextChoices):
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="
    EQ = "=="
    NE = "!="


class AlertRule(models.Model):
    name = models.CharField(max_length=120, unique=True)
    kind = models.CharField(max_length=32, choices=RuleKind.choices, default=RuleKind.THRESHOLD)
    enabled = models.BooleanField(default=True)
    severity = models.CharField(max_length=10, choices=Severity.choices,
                                default=Severity.WARNING)
    # threshold rules: metric, aggregation (+ quantile), optional bitmask; named kinds read
    # the fields they need (docs/alerts.md).
    metric = models.CharField(max_length=80, blank=True)
    aggregation = models.CharField(max_length=10, choices=Aggregation.choices,
                                   default=Aggregation.AVG)
    quantile = models.FloatField(null=True, blank=True)
    # With a mask, each sample counts as 1 when (value & mask) != 0, else 0: "avg" is then the
    # share of samples with one of those bits set (throttle reasons).
    bitmask = models.BigIntegerField(null=True, blank=True)
    window_s = models.PositiveIntegerField(default=60)
    op = models.CharField(max_length=2, choices=Op.choices, default=Op.GT)
    threshold = models.FloatField(default=0.0)
    for_s = models.PositiveIntegerField(default=0)
    keep_firing_for_s = models.PositiveIntegerField(default=0)
    # Scope: empty lists and glob mean everything.
    host_ids = models.JSONField(default=list, blank=True)
    engine_ids = models.JSONField(default=list, blank=True)
    hostname_glob = models.CharField(max_length=253, blank=True)
    # [{label, op, value}] over the target's host, engine, gpu and model labels, as silences
    # match (a label the target lacks reads ""): e.g. model=~"llama-3.*"
    label_matchers = models.JSONField(default=list, blank=True)
    # Extra thresholds of named kinds: {"gpu_util_below": 85}, {"waiting_above": 0}, ...
    params = models.JSONField(default=dict, blank=True)
    summary = models.CharField(max_length=500, blank=True)
    description = models.TextField(blank=True)
    # Set on the rules of the default pack: the loader finds them by it.
    pack_key = models.CharField(max_length=60, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # The claim of an evaluation cycle: UPDATE … WHERE last_evaluated_at < now (evaluate.py).
    last_evaluated_at = models.DateTimeField(null=True, blank=True)
    # Why the rule's last cycle failed, and when: the other rules of that cycle ran on; a cycle
    # in which the rule succeeds clears both.
    last_error = models.CharField(max_length=500, blank=True, default="")
    last_error_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["pack_key"], condition=~models.Q(pack_key=""),
                                    name="alert_rule_unique_pack_key"),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from controlplane.alerts.rules import validate_rule

        validate_rule(self)


class AlertState(models.TextChoices):
    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


class Alert(models.Model):
    """The current state of one rule on one target; one row per (rule, target), reused."""

    # No index of its own: alert_unique_rule_target leads with rule_id (the evaluator writes
    # thousands of alerts a cycle in a storm, and every index costs each write).
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts",
                             db_index=False)
    target = models.CharField(max_length=40)  # "host:3", "gpu:17", "engine:5", "proc:3:4242"
    host_id = models.IntegerField(null=True)
    engine_id = models.IntegerField(null=True)
    gpu_id = models.IntegerField(null=True)
    # alertname, severity, host, engine, gpu: what silences match and notifications group by.
    labels = models.JSONField(default=dict)
    fingerprint = models.CharField(max_length=64)  # indexed by alert_by_fingerprint
    state = models.CharField(max_length=10, choices=AlertState.choices,
                             default=AlertState.INACTIVE)
    value = models.FloatField(null=True)
    summary = models.CharField(max_length=1000, blank=True)
    active_since = models.DateTimeField(null=True)  # condition true since (pending start)
    started_at = models.DateTimeField(null=True)  # firing since
    resolved_at = models.DateTimeField(null=True)
    last_true_at = models.DateTimeField(null=True)
    last_evaluated_at = models.DateTimeField(null=True)
    acknowledged_at = models.DateTimeField(null=True)
    acknowledged_by = models.CharField(max_length=150, blank=True)
    ack_comment = models.CharField(max_length=500, blank=True)

    class Meta:
        permissions = [("ack_alert", "Can acknowledge alerts")]
        constraints = [
            models.UniqueConstraint(fields=["rule", "target"], name="alert_unique_rule_target"),
        ]
        indexes = [
            # The evaluator loads the alerts that are not settled (evaluate.load_open_alerts).
            models.Index(fields=["rule"], name="alert_open_by_rule",
                         condition=models.Q(state__in=["pending", "firing"])),
            # Dispatch and feeds look fingerprints up by equality: a plain btree, without the
            # varchar_pattern_ops twin db_index=True adds for LIKE.
            models.Index(fields=["fingerprint"], name="alert_by_fingerprint"),
        ]

    def __str__(self) -> str:
        return f"{self.rule_id} {self.target} {self.state}"

    @property
    def acknowledged(self) -> bool:
        return self.acknowledged_at is not None


class AlertEvent(models.Model):
    """One state transition of an alert: the history the alerts page shows."""

    # Indexed by alert_event_by_alert, which leads with alert_id.
    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="events",
                              db_index=False)
    at = models.DateTimeField()
    from_state = models.CharField(max_length=10, choices=AlertState.choices)
    to_state = models.CharField(max_length=10, choices=AlertState.choices)
    value = models.FloatField(null=True)
    note = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["alert_id", "at", "id"]
        indexes = [models.Index(fields=["alert", "at"], name="alert_event_by_alert")]

    def __str__(self) -> str:
        return f"{self.alert_id} {self.from_state} -> {self.to_state} at {self.at.isoformat()}"


class Silence(models.Model):
    """Alerts whose labels match every matcher send nothing between starts_at and ends_at.

    matchers: [{"label": "alertname"|"severity"|"host"|"engine"|"gpu",
                "op": "="|"!="|"=~"|"!~", "value": str}]; =~ is a full-match regex.
    """

    matchers = models.JSONField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    author = models.CharField(max_length=150)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    comment = models.CharField(max_length=1000)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-starts_at"]
        indexes = [models.Index(fields=["ends_at"], name="silence_by_end")]

    def __str__(self) -> str:
        return f"silence {self.id} by {self.author}"


class EvaluatorShard(models.Model):
    """One shard of the alert evaluation (hosts with ``id % shards == index``) and the
    evaluator that holds it until ``lease_until`` (``leases.py``); rows past
    ``PITWALL_ALERT_EVAL_SHARDS`` are left alone."""

    index = models.PositiveIntegerField(primary_key=True)
    owner = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True)
    evaluated_at = models.DateTimeField(null=True)  # its newest cycle's instant

    class Meta:
        ordering = ["index"]

    def __str__(self) -> str:
        return f"evaluator shard {self.index} held by {self.owner or 'nobody'}"


class Evaluator(models.Model):
    """An evaluating process (a Celery worker node, or beat while the broker is down), seen
    at each of its cycles: the live ones share the shards."""

    name = models.CharField(max_length=200, primary_key=True)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.name


class ShardClaim(models.Model):
    """The claim of a rule's cycle in one shard, as ``AlertRule.last_evaluated_at`` is for the
    whole fleet: a repeated cycle of the shard for the same instant does nothing, and the
    previous instant is what the state machine counts ``keep_firing_for`` from."""

    shards = models.PositiveIntegerField()
    index = models.PositiveIntegerField()
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="+")
    evaluated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["shards", "index", "rule"],
                                               name="shard_claim_unique")]

    def __str__(self) -> str:
        return f"rule {self.rule_id} in shard {self.index}/{self.shards} at {self.evaluated_at}"


from controlplane.alerts.delivery.models import (  # noqa: E402,F401,I001
    AlertmanagerFeed, Channel, Notification, NotificationGroup, Route)
