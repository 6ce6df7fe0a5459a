"""Adding entries to the audit log."""

from __future__ import annotations

from typing import Any

from controlplane.audit import actor as actors
from controlplane.audit.models import AuditEntry

REDACTED = "(redacted)"


def record(action: str, target_type: str, target_id: Any, target: str,
           changes: dict[str, list[Any]] | None = None,
           by: actors.Actor | None = None) -> AuditEntry:
    who = by or actors.current()
    return AuditEntry.objects.create(
        actor=who.name, user_id=who.user_id, via=who.via, address=who.address,
        action=action[:24], target_type=target_type[:40], target_id=str(target_id)[:64],
        target=str(target)[:200], changes=changes or {})
