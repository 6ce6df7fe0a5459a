"""Read-side helpers for the fleet: online state from last-seen."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from controlplane.fleet.models import Host


def online_cutoff():
    return timezone.now() - timedelta(seconds=settings.PITWALL["ONLINE_WINDOW_S"])


def is_online(last_seen) -> bool:
    return last_seen is not None and last_seen >= online_cutoff()


def hosts_with_state() -> QuerySet[Host]:
    return Host.objects.prefetch_related("gpus", "engines").order_by("hostname")
