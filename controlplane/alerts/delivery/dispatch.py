"""From the Alert table to Notification rows: route, group, decide, write (docs/notifications.md).

One pass reads every firing alert, the active silences, the routes and the group rows once; it
writes the group rows and one Notification per channel for each group that sends. Channels
that talk to an Alertmanager (``FEED_KINDS``) are fed every alert routed to them instead, in the
same pass (feeds.py). Delivery is separate (service.deliver): rows written here are the queue.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.alerts.delivery.feeds import write_feeds
from controlplane.alerts.delivery.grouping import Bucket, Outcome, decide
from controlplane.alerts.delivery.models import Notification, NotificationGroup
from controlplane.alerts.delivery.routing import Plan, load_plans, plans_for
from controlplane.alerts.models import Alert, AlertRule, AlertState
from controlplane.alerts.silences import active_silences, silence_of
from controlplane.alerts.transports import FEED_KINDS
from controlplane.alerts.transports import Alert as MessageAlert
from controlplane.alerts.transports import Notification as Message

# pg_try_advisory_xact_lock key: one dispatch at a time, whatever the number of workers.
DISPATCH_LOCK = 0x7069_7477_6E6F  # "pitwno"


def setting(key: str, default):
    return settings.PITWALL.get(key, default)


def external_url() -> str:
    return str(setting("ALERT_EXTERNAL_URL", "")).rstrip("/")


def retry_for() -> timedelta:
    return timedelta(seconds=int(setting("ALERT_DELIVERY_RETRY_FOR_S", 24 * 3600)))


class Firing(NamedTuple):
    """What dispatch reads of a firing alert: a plain row, not a model instance (a storm has
    tens of thousands, read every few seconds)."""

    id: int
    fingerprint: str
    labels: dict
    summary: str
    started_at: datetime | None
    acknowledged_at: datetime | None
    rule_id: int


class RuleText(NamedTuple):
    name: str
    summary: str
    description: str


def message_alert(alert: Firing, rule: RuleText, now: datetime) -> MessageAlert:
    annotations = {"summary": alert.summary or rule.summary or rule.name,
                   "description": rule.description}
    base = external_url()
    return MessageAlert(
        fingerprint=alert.fingerprint, status="firing",
        labels={k: str(v) for k, v in (alert.labels or {}).items()},
        annotations={k: v for k, v in annotations.items() if v},
        starts_at=alert.started_at or now,
        generator_url=f"{base}/alerts/{alert.id}" if base else "",
    )


def dispatch(now: datetime | None = None) -> list[int]:
    """One pass; the ids of the Notification rows written. Skips while another pass runs."""
    now = now or timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%(key)s)", {"key": DISPATCH_LOCK})
            if not cursor.fetchone()[0]:
                return []
        plans, default = load_plans()
        silences = list(active_silences(now))
        firing = read_firing(now)
        buckets = collect(plans, default, silences, firing)
        ids = write_groups_and_notifications(buckets, plans, default, silences, now)
        # Channels that talk to an Alertmanager get every firing alert instead (feeds.py).
        return ids + write_feeds(plans, default, [m for _, m in firing], now,
                                 external_url(), now + retry_for())


def read_firing(now: datetime) -> list[tuple[Firing, MessageAlert]]:
    """Every firing alert, as read and as a message's alert (one query, plus the rules)."""
    rules = {id_: RuleText(*text) for id_, *text in
             AlertRule.objects.values_list("id", "name", "summary", "description")}
    return [(alert, message_alert(alert, rules[alert.rule_id], now)) for alert in
            (Firing(*row) for row in
             Alert.objects.filter(state=AlertState.FIRING).values_list(*Firing._fields))]


def collect(plans: list[Plan], default: Plan, silences: list,
            firing: list[tuple[Firing, MessageAlert]]) -> dict[str, Bucket]:
    buckets: dict[str, Bucket] = {}
    for alert, message in firing:
        labels = message.labels
        silenced = silence_of(labels, silences) is not None
        for plan in plans_for(labels, plans, default):
            group_labels = plan.group_labels(labels)
            key = plan.group_key(group_labels)
            bucket = buckets.setdefault(key, Bucket(plan, group_labels))
            if silenced:
                bucket.muted.add(alert.fingerprint)
                continue
            bucket.firing[alert.fingerprint] = message
            if alert.acknowledged_at is not None:
                bucket.acknowledged.add(alert.fingerprint)
    return buckets


def write_groups_and_notifications(buckets: dict[str, Bucket], plans: list[Plan],
                                   default: Plan, silences: list, now: datetime) -> list[int]:
    """Decide every notification group (``grouping.decide``) and write the outcome: the
    NotificationGroup rows whose state moved (first seen, last sent, the alerts sent; new
    groups created), and one queued Notification per channel of each group that sends now.
    ``buckets``: the groups the firing alerts are in now (``collect``); groups with nothing
    firing but something sent or waiting are decided too, so their alerts resolve. Returns the
    ids of the Notification rows, which ``service.deliver`` sends."""
    # Groups with something sent or waiting, and the groups alerts are in now.
    rows = {g.key: g for g in NotificationGroup.objects.filter(
        Q(key__in=list(buckets)) | ~Q(sent={}) | Q(first_seen_at__isnull=False))}
    by_route = {p.route.id: p for p in plans if p.route}
    resolved_at = resolved_times(rows.values(), buckets)

    def silenced(labels: dict) -> bool:
        return silence_of(labels, silences) is not None

    sends: list[tuple[NotificationGroup, Plan, Outcome]] = []
    changed, created = [], []
    group_of = _groups_of_alerts(buckets)
    for key in set(rows) | set(buckets):
        row, bucket = rows.get(key), buckets.get(key)
        if bucket is None:
            plan = by_route.get(row.route_id) if row.route_id else default
            if plan is None:
                continue  # its route is disabled: left as it was
            bucket = Bucket(plan, row.group_labels)
        is_new = row is None
        if row is None:
            row = NotificationGroup(key=key, route=bucket.plan.route,
                                    group_labels=bucket.group_labels)
        # An alert sent in this group that is now in another group of the route (its
        # group_by changed) has not resolved: it leaves this group without a word.
        sent = {fp: a for fp, a in row.sent.items()
                if group_of.get((bucket.plan.route_id, fp), key) == key}
        outcome = decide(row.first_seen_at, row.last_sent_at, sent, bucket, silenced,
                         resolved_at, now)
        state = (outcome.first_seen_at, outcome.last_sent_at, outcome.sent)
        if state != (row.first_seen_at, row.last_sent_at, row.sent):
            row.first_seen_at, row.last_sent_at, row.sent = state
            (created if is_new else changed).append(row)
        if outcome.sends:
            sends.append((row, bucket.plan, outcome))
    NotificationGroup.objects.bulk_create(created)
    NotificationGroup.objects.bulk_update(changed, ["first_seen_at", "last_sent_at", "sent"])
    made = Notification.objects.bulk_create(
        [notification(row, plan, outcome, channel, now)
         for row, plan, outcome in sends for channel in plan.channels
         if channel.kind not in FEED_KINDS])  # feeds.py serves those
    return [n.id for n in made]


def _groups_of_alerts(buckets: dict[str, Bucket]) -> dict[tuple[int | None, str], str]:
    """(route id, fingerprint) -> the key of the group the alert is in now, firing or muted."""
    out = {}
    for key, bucket in buckets.items():
        for fp in (*bucket.firing, *bucket.muted):
            out[(bucket.plan.route_id, fp)] = key
    return out


def resolved_times(rows, buckets: dict[str, Bucket]) -> dict[str, datetime]:
    """When the alerts sent as firing and not firing now resolved (one query)."""
    gone = {fp for row in rows for fp in row.sent
            if row.key not in buckets or fp not in buckets[row.key].firing}
    if not gone:
        return {}
    return dict(Alert.objects.filter(fingerprint__in=gone, state=AlertState.RESOLVED)
                .values_list("fingerprint", "resolved_at"))


def notification(row: NotificationGroup, plan: Plan, outcome: Outcome, channel,
                 now: datetime) -> Notification:
    alerts = outcome.alerts or []
    status = "firing" if any(a.status == "firing" for a in alerts) else "resolved"
    matchers = ",".join(f'{k}="{v}"' for k, v in sorted(row.group_labels.items()))
    ident = uuid.uuid4()
    message = Message(id=str(ident), status=status, receiver=channel.name,
                      group_key=f"{plan.name}:{{{matchers}}}", group_labels=row.group_labels,
                      alerts=alerts, created_at=now, external_url=external_url())
    return Notification(uuid=ident, channel=channel, group=row, status=status,
                        created_at=now, next_attempt_at=now, give_up_at=now + retry_for(),
                        payload=message.to_dict())
