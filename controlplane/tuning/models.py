"""Suggestions: a diagnosis of one vLLM server, what to change, the evidence, and what came of
it. For a deployment (Pitwall runs it): accepted, applied by the agent, verified against equal
windows before and after. For an engine Pitwall only watches (no deployment): a report, with
the ``vllm serve`` flags to change as a command-line fragment to paste; dismissed or cleared,
never accepted."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from controlplane.fleet.models import Deployment, Engine


class Kind(models.TextChoices):
    KV_PRESSURE = "kv_pressure", "KV-cache pressure"
    CONCURRENCY_CAP = "concurrency_cap", "Concurrency cap"
    PREFILL_TTFT = "prefill_ttft", "Prefill starves TTFT"
    PREFILL_ITL = "prefill_itl", "Prefill interferes with ITL"
    CPU_STARVATION = "cpu_starvation", "CPU starvation"
    NUMA_MISMATCH = "numa_mismatch", "NUMA mismatch"
    FOREIGN_MEMORY = "foreign_memory", "Foreign GPU memory"
    HOST_READINESS = "host_readiness", "Host readiness"
    OVER_PROVISIONED = "over_provisioned", "Over-provisioned"


class State(models.TextChoices):
    OPEN = "open"  # the symptom holds; waiting for an operator
    CLEARED = "cleared"  # the symptom went away before anyone decided
    DISMISSED = "dismissed"
    ACCEPTED = "accepted"  # the desired config changed; the agent has not applied it yet
    APPLIED = "applied"  # running; waiting for a window after the change to compare
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    REGRESSED = "regressed"
    REVERTED = "reverted"


DECIDED = (State.ACCEPTED, State.APPLIED, State.IMPROVED, State.UNCHANGED, State.REGRESSED)


class Suggestion(models.Model):
    # None: Pitwall does not run this vLLM server; ``engine`` names it (a report only).
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, null=True, blank=True,
                                   related_name="suggestions")
    # The server's first engine (data-parallel rank 0); None for a deployment whose engine the
    # agent has not reported yet. Engines are only deleted with their host.
    engine = models.ForeignKey(Engine, on_delete=models.CASCADE, null=True, blank=True,
                               related_name="suggestions")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    # [{"field": "args.max_num_seqs", "current": 256, "proposed": 128}]; empty: a report only
    changes = models.JSONField(default=list)
    reasoning = models.TextField()
    expected = models.TextField()  # the effect to expect, in a sentence
    confidence = models.FloatField()  # 0-1
    # [{"metric", "stat", "value", "threshold", "unit", "entity", "entity_id", "start", "end"}]
    evidence = models.JSONField(default=list)
    severity = models.FloatField()  # how bad, in the diagnosis's own unit: compares evidence
    # the deployment's revision it was made against; None for an engine Pitwall does not run
    revision = models.PositiveIntegerField(null=True, blank=True)
    # For an engine Pitwall does not run: the change as a command line fragment to paste
    # (``--max-num-seqs 128``; a numactl or CUDA_VISIBLE_DEVICES prefix where it takes one).
    command = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)  # evidence last refreshed
    decided_at = models.DateTimeField(null=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    revision_after = models.PositiveIntegerField(null=True)  # the revision accepting made
    applied_at = models.DateTimeField(null=True)  # the agent reported it running
    verified_at = models.DateTimeField(null=True)
    # {"before": {...}, "after": {...}, "windows": {...}, "summary": "..."}
    verification = models.JSONField(default=dict)

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("decide_suggestion", "Can accept, dismiss and revert suggestions")]
        constraints = [
            # One open suggestion per deployment and diagnosis: a pass refreshes it in place.
            models.UniqueConstraint(fields=["deployment", "kind"],
                                    condition=models.Q(state="open"),
                                    name="suggestion_one_open_per_kind"),
            # ... and per engine Pitwall does not run (NULL deployments are distinct above).
            models.UniqueConstraint(fields=["engine", "kind"],
                                    condition=models.Q(state="open", deployment__isnull=True),
                                    name="suggestion_one_open_per_engine_kind"),
            models.CheckConstraint(condition=models.Q(deployment__isnull=False)
                                   | models.Q(engine__isnull=False),
                                   name="suggestion_names_its_server"),
        ]
        indexes = [models.Index(fields=["state", "deployment"])]

    def __str__(self) -> str:
        if self.deployment_id is None:
            return f"{self.kind} for engine {self.engine_id} ({self.state})"
        return f"{self.kind} for deployment {self.deployment_id} ({self.state})"

    @property
    def report_only(self) -> bool:
        """Nothing Pitwall can apply: a report, or a server it does not run."""
        return self.deployment_id is None or not self.changes
