"""Which evaluating worker holds which evaluator shard: leases in PostgreSQL.

With ``PITWALL_ALERT_EVAL_SHARDS`` = n > 1, beat's evaluation tick reaches every worker (a
Celery broadcast queue, ``controlplane/celery.py``), and each runs a cycle for the shards it
holds. Before its cycles a worker, in one short transaction that locks the shard rows:

1. says it is alive (``Evaluator.seen_at``);
2. counts the live evaluators (seen within one lease) and its fair share, ceil(n / live);
3. renews the shards it holds up to that share and gives back the rest (a newcomer gets
   them at its next tick), then takes shards whose lease lapsed (or that nobody held) up to
   its share.

A worker that dies stops renewing: its leases lapse after ``lease_s`` (1.5 evaluation
intervals by default) and the next tick of any live worker takes its shards, with their
alerts, which are rows in PostgreSQL. Nothing is lost: the new holder reads the shard's
window from raw rows (its slices are new), and each rule's claim per shard
(``ShardClaim``) says where the previous holder stopped. Nothing is done twice: a shard's
cycle holds a transaction lock of the shard's own, so a holder that lost its lease in the
middle of a cycle and the worker that took it over never step the same alerts at once, and a
claim is taken once per instant.

Time is PostgreSQL's (``now()``), not the workers': leases compare across machines.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from controlplane.alerts.models import Evaluator, EvaluatorShard

# An evaluator not seen for this long is forgotten (its row only: its leases lapsed long ago).
FORGET_AFTER = timedelta(days=1)


def lease_seconds() -> float:
    """The lease, 1.5 intervals by default: a worker renews at the start and the end of its
    cycles, so no gap between two renewals is longer than an interval; a lost worker's shards
    lapse before the second tick after its last renewal, which takes them (one cycle missed)."""
    pitwall = settings.PITWALL
    return float(pitwall["ALERT_EVAL_LEASE_S"] or 1.5 * pitwall["ALERT_EVAL_INTERVAL_S"])


def _lease(lease_s: float | None) -> timedelta:
    return timedelta(seconds=lease_seconds() if lease_s is None else lease_s)


def hold(owner: str, n: int, lease_s: float | None = None) -> list[int]:
    """The shards ``owner`` evaluates now (renewed or taken), of ``n``, in index order."""
    lease = _lease(lease_s)
    with transaction.atomic():
        Evaluator.objects.update_or_create(name=owner, defaults={"seen_at": Now()})
        Evaluator.objects.filter(seen_at__lt=Now() - FORGET_AFTER).delete()
        EvaluatorShard.objects.bulk_create([EvaluatorShard(index=i) for i in range(n)],
                                           ignore_conflicts=True)
        rows = list(EvaluatorShard.objects.select_for_update().filter(index__lt=n))
        now = _database_now()
        live = Evaluator.objects.filter(seen_at__gt=now - lease).count()
        share = math.ceil(n / max(live, 1))
        mine = [r.index for r in rows if r.owner == owner]
        keep, give_back = mine[:share], mine[share:]
        free = [r.index for r in rows if r.owner != owner
                and (not r.owner or r.lease_until is None or r.lease_until <= now)]
        held = sorted(keep + free[:max(share - len(keep), 0)])
        EvaluatorShard.objects.filter(index__in=held).update(owner=owner,
                                                             lease_until=Now() + lease)
        EvaluatorShard.objects.filter(index__in=give_back).update(owner="", lease_until=None)
    return held


def _database_now() -> datetime:
    """PostgreSQL's clock (the transaction's start), which every worker's leases share."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def renew(owner: str, indexes: list[int], lease_s: float | None = None,
          evaluated_at: datetime | None = None) -> list[int]:
    """After the cycles: the lease runs from their end, not their start (a long cycle must
    not lose its shards). Those still ``owner``'s (another worker may have taken one whose
    lease lapsed meanwhile). ``evaluated_at``: the cycles' instant, recorded here rather than
    in a cycle's transaction, where the row's lock would hold every other worker's ``hold``
    until the cycle ends."""
    lease = _lease(lease_s)
    with transaction.atomic():
        rows = EvaluatorShard.objects.select_for_update().filter(index__in=indexes,
                                                                  owner=owner)
        still = sorted(rows.values_list("index", flat=True))
        update: dict = {"lease_until": Now() + lease}
        if evaluated_at is not None:
            update["evaluated_at"] = evaluated_at
        EvaluatorShard.objects.filter(index__in=still).update(**update)
    return still


def release(owner: str) -> None:
    """Give every shard back (a worker shutting down): the others take them at their next
    tick instead of after the lease."""
    EvaluatorShard.objects.filter(owner=owner).update(owner="", lease_until=None)
    Evaluator.objects.filter(name=owner).delete()
