"""Delivering Notification rows: claim, one attempt, record the outcome; channels; tests.

The rows are the queue. ``claim`` moves a due row to "sending" with a conditional UPDATE, so
two workers never send one row at once; the claim is a lease (``lease()``): a worker that dies
mid-attempt leaves the row claimable again once it runs out, and the receiver drops the
repeat by the notification id (the same on every attempt).

Channels are isolated: a worker attempts a channel's rows only while it holds the channel's
turn, a PostgreSQL session advisory lock (``channel_turn``). So at most one attempt per
channel is in flight, a slow or failing receiver holds one worker slot and no more (other
channels' deliveries run in the other slots: tasks.deliver_due queues one task per channel),
and a worker that is killed frees the turn with its session, at once. A lease that runs out
while its attempt is still in flight (a slow receiver) cannot start a second attempt on the
same channel: the turn is still held.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connection
from django.db.models import F, QuerySet
from django.utils import timezone

from controlplane.alerts.delivery.dispatch import external_url, setting
from controlplane.alerts.delivery.feeds import (
    SUPERSEDED_DETAIL,
    current,
    is_feed_post,
    is_superseded,
)
from controlplane.alerts.delivery.grouping import alert_from_dict
from controlplane.alerts.delivery.models import (
    CLAIMABLE,
    Channel,
    DeliveryState,
    Notification,
)
from controlplane.alerts.metrics import count_attempt
from controlplane.alerts.transports import Notification as Message
from controlplane.alerts.transports import (
    TransportError,
    get_transport,
    make_test_notification,
)
from controlplane.alerts.transports.base import attempt_timeout

log = logging.getLogger(__name__)

# The claim's lease when none is configured: two minutes, or four attempt timeouts if longer
# (an SMTP conversation waits up to one timeout per reply).
DEFAULT_LEASE_S = 120
LEASE_TIMEOUTS = 4
# A configured lease must outlast one request's timeout by this much at least.
LEASE_MARGIN_S = 10
RETRY_AFTER_CAP_S = 3600
# The advisory lock space of channel turns: pg_try_advisory_lock(hashtext(this), channel id).
TURN_LOCK_NAME = "pitwall.delivery.channel"
# deliver_channel stops taking more rows after this long (the next tick continues), so that a
# long backlog on a slow receiver gives its worker slot back now and then.
CHANNEL_BUDGET_S = 300


def lease_s() -> float:
    """Seconds a claim lasts: ``PITWALL["ALERT_DELIVERY_LEASE_S"]``, else (0) the default
    above. A killed worker's rows are attempted again this long after its claim."""
    timeout = attempt_timeout()
    configured = setting("ALERT_DELIVERY_LEASE_S", 0)
    if not configured:
        return float(max(DEFAULT_LEASE_S, LEASE_TIMEOUTS * timeout))
    lease = float(configured)
    if lease < timeout + LEASE_MARGIN_S:
        raise ImproperlyConfigured(
            f"ALERT_DELIVERY_LEASE_S ({lease:g}) must be at least ALERT_DELIVERY_TIMEOUT_S "
            f"({timeout:g}) + {LEASE_MARGIN_S} s: a lease that ends before its attempt does "
            "lets another worker send the notification again meanwhile")
    return lease


def lease() -> timedelta:
    return timedelta(seconds=lease_s())


@contextmanager
def channel_turn(channel_id: int) -> Iterator[bool]:
    """Whether this worker got the channel's turn (False: another worker is attempting one of
    its rows). A session lock, not a transaction's: it lasts across the attempt's own commits,
    and a worker killed mid-attempt loses its session and so the lock."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtext(%(space)s), %(channel)s)",
                       {"space": TURN_LOCK_NAME, "channel": channel_id})
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            release_turn(channel_id)


def release_turn(channel_id: int) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%(space)s), %(channel)s)",
                           {"space": TURN_LOCK_NAME, "channel": channel_id})
    except DatabaseError:  # the session is gone (a restarted server): so is its lock
        log.warning("channel %s: could not release its delivery turn", channel_id,
                    exc_info=True)


def backoff(attempts: int, retry_after: int | None = None) -> float:
    """Seconds before the next attempt: 10 s, 20 s, 40 s … capped at 10 min, ±20 % jitter;
    never sooner than the receiver's Retry-After (itself capped at an hour)."""
    low = float(setting("ALERT_DELIVERY_BACKOFF_MIN_S", 10))
    high = float(setting("ALERT_DELIVERY_BACKOFF_MAX_S", 600))
    delay = min(high, low * 2 ** max(attempts - 1, 0)) * random.uniform(0.8, 1.2)
    delay = min(high, delay)
    if retry_after:
        delay = max(delay, float(min(retry_after, RETRY_AFTER_CAP_S)))
    return delay


def claim(notification_id: int, now: datetime) -> bool:
    return Notification.objects.filter(
        id=notification_id, state__in=CLAIMABLE, next_attempt_at__lte=now,
    ).update(state=DeliveryState.SENDING, attempts=F("attempts") + 1, last_attempt_at=now,
             next_attempt_at=now + lease()) == 1


def due_rows(now: datetime, channel_id: int | None = None) -> QuerySet[Notification]:
    # Uses the partial index "notification_due".
    rows = Notification.objects.filter(state__in=CLAIMABLE, next_attempt_at__lte=now)
    return rows if channel_id is None else rows.filter(channel_id=channel_id)


def due_ids(now: datetime, limit: int = 100, channel_id: int | None = None) -> list[int]:
    return list(due_rows(now, channel_id).order_by("next_attempt_at")
                .values_list("id", flat=True)[:limit])


def due_channels(now: datetime | None = None) -> list[int]:
    """The channels with a row to attempt now."""
    now = now or timezone.now()
    return sorted(set(due_rows(now).values_list("channel_id", flat=True).distinct()))


def deliver_due(now: datetime | None = None, limit: int = 100) -> list[Notification]:
    """Every due row of every channel not busy elsewhere (at most ``limit`` per channel), in
    this process, one channel after another: beat's path while the broker is down, and
    tests'. The worker's task runs each channel in a task of its own instead."""
    return [row for channel_id in due_channels(now)
            for row in deliver_channel(channel_id, now, limit) or []]


def deliver_channel(channel_id: int, now: datetime | None = None,
                    limit: int = 100) -> list[Notification] | None:
    """The channel's due rows one after another, holding its turn; None when another worker
    holds it (its rows stay due: that worker, or the next tick, attempts them)."""
    with channel_turn(channel_id) as mine:
        if not mine:
            return None
        started = timezone.now()
        attempted = []
        for row_id in due_ids(now or started, limit, channel_id):
            if (timezone.now() - started).total_seconds() > CHANNEL_BUDGET_S:
                break
            if row := attempt(row_id, now or timezone.now()):
                attempted.append(row)
        return attempted


def message_from_payload(payload: dict) -> Message:
    return Message(
        id=payload["id"], status=payload["status"], receiver=payload["receiver"],
        group_key=payload["group_key"], group_labels=dict(payload["group_labels"]),
        alerts=[alert_from_dict(a) for a in payload["alerts"]],
        created_at=datetime.fromisoformat(payload["created_at"]),
        external_url=payload.get("external_url", ""), test=payload.get("test", False),
    )


def deliver(notification_id: int, now: datetime | None = None) -> Notification | None:
    """One attempt of one row if it is due and its channel's turn is free; None when it is
    not (sent, claimed elsewhere, or the channel busy with another attempt)."""
    channel_id = (Notification.objects.filter(id=notification_id)
                  .values_list("channel_id", flat=True).first())
    if channel_id is None:
        return None
    with channel_turn(channel_id) as mine:
        return attempt(notification_id, now) if mine else None


def attempt(notification_id: int, now: datetime | None = None) -> Notification | None:
    """One attempt of one row if it is due (the caller holds its channel's turn, or is a
    test send, which does not wait for one)."""
    now = now or timezone.now()
    if not claim(notification_id, now):
        return None
    row = Notification.objects.select_related("channel").get(id=notification_id)
    channel = row.channel
    if not channel.enabled and not row.test:
        finish(row, now, state=DeliveryState.FAILED,
               last_error=f"channel disabled: {channel.disabled_reason}"[:500])
        return row
    if is_superseded(row):  # a newer post of its feed went or goes out: never undo it
        finish(row, now, state=DeliveryState.SUPERSEDED, detail=SUPERSEDED_DETAIL)
        return row
    message = message_from_payload(row.payload)
    if is_feed_post(row):
        message = current(row, message)
    try:
        result = get_transport(channel.kind).notify(channel.config, message)
    except TransportError as exc:
        failed(row, exc, now)
    except Exception as exc:  # a bug must not leave the row claimed until the lease ends
        log.exception("notification %s to channel %s: unexpected error", row.uuid, channel.id)
        failed(row, TransportError(f"internal error: {type(exc).__name__}"), now)
    else:
        finish(row, now, state=DeliveryState.SENT, sent_at=now, detail=result.detail[:500],
               last_error="")
        record(channel, now, ok=True, detail=result.detail)
        count_attempt(channel.kind, ok=True)
    return row


def failed(row: Notification, exc: TransportError, now: datetime) -> None:
    reason = str(exc)[:500]
    record(row.channel, now, ok=False, detail=reason)
    count_attempt(row.channel.kind, ok=False, final=exc.permanent or now >= row.give_up_at)
    if exc.permanent:
        finish(row, now, state=DeliveryState.FAILED, last_error=reason)
        if not row.test:  # a failed test shows its error; it does not switch the channel off
            disable_channel(row.channel, reason, now)
    elif now >= row.give_up_at:
        tries = f"{row.attempts} attempt{'s' if row.attempts != 1 else ''}"
        finish(row, now, state=DeliveryState.FAILED,
               last_error=f"{reason} (gave up after {tries})"[:500])
    else:
        log.info("notification %s to channel %s: attempt %d failed, will retry: %s",
                 row.uuid, row.channel_id, row.attempts, reason)
        wait = timedelta(seconds=backoff(row.attempts, exc.retry_after))
        finish(row, now, state=DeliveryState.RETRYING, last_error=reason,
               next_attempt_at=now + wait)


def finish(row: Notification, now: datetime, **fields) -> None:
    # Only while still ours: a row whose lease ran out may have been claimed again.
    Notification.objects.filter(id=row.id, state=DeliveryState.SENDING).update(**fields)
    for name, value in fields.items():
        setattr(row, name, value)


def record(channel: Channel, now: datetime, *, ok: bool, detail: str) -> None:
    """Every delivery attempt's outcome passes here once: sent (``ok``) or failed, with the
    channel (and so its ``kind``). Rows never attempted (superseded, channel disabled) don't."""
    Channel.objects.filter(id=channel.id).update(last_attempt_at=now, last_ok=ok,
                                                 last_detail=detail[:500])


def disable_channel(channel: Channel, reason: str, now: datetime | None = None) -> None:
    """Switch a channel off with the reason shown; its queued notifications fail with it."""
    now = now or timezone.now()
    Channel.objects.filter(id=channel.id).update(enabled=False, disabled_reason=reason[:500],
                                                 disabled_at=now)
    channel.enabled, channel.disabled_reason, channel.disabled_at = False, reason[:500], now
    log.warning("channel %s (%s) disabled: %s", channel.id, channel.name, reason)
    Notification.objects.filter(
        channel=channel, test=False,
        state__in=[DeliveryState.PENDING, DeliveryState.RETRYING],
    ).update(state=DeliveryState.FAILED, last_error=f"channel disabled: {reason}"[:500])


def enable_channel(channel: Channel) -> None:
    Channel.objects.filter(id=channel.id).update(enabled=True, disabled_reason="",
                                                 disabled_at=None)
    channel.enabled, channel.disabled_reason, channel.disabled_at = True, "", None


def create_channel(*, name: str, kind: str, config: dict) -> Channel:
    """A channel with its config validated by its transport (ValidationError otherwise)."""
    channel = Channel(name=name, kind=kind, config=config)
    channel.full_clean()  # ValidationError names "config" or "kind", never the secret
    channel.save()
    return channel


def send_test(channel: Channel, now: datetime | None = None) -> Notification:
    """"Send test notification": one attempt, recorded like any other; not retried."""
    now = now or timezone.now()
    message = make_test_notification(channel.name, external_url())
    row = Notification.objects.create(
        uuid=message.id, channel=channel, test=True, status=message.status,
        created_at=now, next_attempt_at=now, give_up_at=now, payload=message.to_dict())
    return deliver(row.id, now) or row
