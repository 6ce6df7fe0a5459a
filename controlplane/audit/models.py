"""The audit log: who changed what, when and from where. Rows are only ever added."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class AuditEntry(models.Model):
    at = models.DateTimeField(default=timezone.now, db_index=True)
    # The username at the time, or "system: <process>"; no foreign key, so that an entry
    # outlives its user and is never rewritten by a cascade.
    actor = models.CharField(max_length=150)
    user_id = models.IntegerField(null=True)
    via = models.CharField(max_length=40)  # "session", "token pwu_3f9c2a1b…", "system"
    address = models.GenericIPAddressField(null=True)
    action = models.CharField(max_length=24)  # created, changed, deleted, acknowledged, ...
    target_type = models.CharField(max_length=40)  # "alert rule", "deployment", "user", ...
    target_id = models.CharField(max_length=64)
    target = models.CharField(max_length=200)  # what it was called then
    # {field: [before, after]}; secrets read "(redacted)".
    changes = models.JSONField(default=dict)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_by_target"),
                   models.Index(fields=["actor", "at"], name="audit_by_actor")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target_type}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise ValueError("audit entries are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("audit entries are append-only")
