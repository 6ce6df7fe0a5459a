"""Feeds: what dispatch queues for channels that talk to an Alertmanager (``FEED_KINDS``).

Alertmanager expects of a client what Prometheus does: every firing alert re-posted every
resend interval with ``endsAt`` a few intervals ahead (so Alertmanager resolves it on its own
if the client dies), and a resolved alert posted with its resolve time, re-posted for 15
minutes. Alertmanager owns grouping, inhibition and silences: for a feed channel Pitwall's
route *matching* applies (which alerts reach it), its group_wait/interval/repeat do not, and
neither do Pitwall's silences and acknowledgements — the feed mirrors what fires, as
Prometheus does; silence in Alertmanager.

Per channel, one ``AlertmanagerFeed`` row keeps what was last queued. A pass writes one
Notification (every alert of the feed, firing and recently resolved) when the set changed or
``resend_s`` passed since the last one; the new row supersedes the channel's older unsent
ones, so an old "firing" never reaches Alertmanager after a newer "resolved".
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from controlplane.alerts.delivery.grouping import alert_from_dict
from controlplane.alerts.delivery.models import (
    AlertmanagerFeed,
    Channel,
    DeliveryState,
    Notification,
)
from controlplane.alerts.delivery.routing import Plan, plans_for
from controlplane.alerts.models import Alert, AlertState
from controlplane.alerts.transports import FEED_KINDS
from controlplane.alerts.transports import Alert as MessageAlert
from controlplane.alerts.transports import Notification as Message
from controlplane.alerts.transports.alertmanager_api import RESEND_DEFAULT_S

# Prometheus re-sends a resolved alert for 15 minutes (rules.resolvedRetention).
RESOLVED_RESEND = timedelta(minutes=15)
SUPERSEDED_DETAIL = "superseded: a newer post of this feed carries the current alerts"
# A feed writes a row every resend_s while anything fires: rows sent or superseded longer ago
# than this are deleted (a failed one is kept to show why).
FEED_HISTORY = timedelta(hours=1)


@dataclass
class FeedOutcome:
    posted: dict[str, dict]  # what the feed holds now: firing, and resolved < 15 min ago
    sends: bool = False  # a post goes out (each attempt posts what the feed holds then)


def step(posted: dict[str, dict], last_posted_at: datetime | None,
         firing: dict[str, MessageAlert], resolved_at: dict[str, datetime], resend_s: int,
         now: datetime) -> FeedOutcome:
    """Pure: what one feed holds and whether it posts now.

    ``firing``: the alerts routed to the channel that fire now; ``posted``: what the feed
    held after its last pass; ``resolved_at``: when the alerts that stopped firing resolved
    (an alert that merely stopped matching the channel's routes ends ``now``)."""
    held: dict[str, dict] = {}
    changed = False
    for fp, alert in firing.items():
        held[fp] = alert.to_dict()
        before = posted.get(fp)
        if (before is None or before["status"] != "firing"
                or before["starts_at"] != held[fp]["starts_at"]):
            changed = True  # new, firing again, or a new episode of it
    for fp, before in posted.items():
        if fp in firing:
            continue
        if before["status"] == "firing":
            changed = True
            ends = resolved_at.get(fp) or now
            held[fp] = alert_from_dict(before, status="resolved", ends_at=ends).to_dict()
        elif now - datetime.fromisoformat(before["ends_at"]) < RESOLVED_RESEND:
            held[fp] = before  # re-posted with its resolve time a while, as Prometheus does
    due = last_posted_at is None or now - last_posted_at >= timedelta(seconds=resend_s)
    return FeedOutcome(held, sends=bool(held) and (changed or due))


def feed_channels(default: Plan) -> list[Channel]:
    """The enabled feed channels: all of them, routed to or not, so that a channel whose
    routes stopped matching an alert posts its resolution."""
    return [c for c in default.channels if c.kind in FEED_KINDS]


def routed(alerts: Iterable[MessageAlert], plans: list[Plan], default: Plan,
           channel_ids: set[int]) -> dict[int, dict[str, MessageAlert]]:
    """Channel id -> the firing alerts its routes take (route matching only)."""
    out: dict[int, dict[str, MessageAlert]] = {cid: {} for cid in channel_ids}
    for alert in alerts:
        for plan in plans_for(alert.labels, plans, default):
            for channel in plan.channels:
                if channel.id in channel_ids:
                    out[channel.id][alert.fingerprint] = alert
    return out


def write_feeds(plans: list[Plan], default: Plan, firing: list[MessageAlert], now: datetime,
                external_url: str, give_up_at: datetime) -> list[int]:
    """One pass over every feed channel (inside dispatch's transaction and lock): update the
    feed rows and queue a Notification for each feed that posts. Returns their ids."""
    channels = feed_channels(default)
    if not channels:
        return []
    current = routed(firing, plans, default, {c.id for c in channels})
    feeds = {f.channel_id: f for f in AlertmanagerFeed.objects.filter(channel__in=channels)}
    gone = {fp for f in feeds.values() for fp, a in f.posted.items()
            if a["status"] == "firing" and fp not in current[f.channel_id]}
    resolved_at = dict(Alert.objects.filter(fingerprint__in=gone, state=AlertState.RESOLVED)
                       .order_by("resolved_at").values_list("fingerprint", "resolved_at"))
    created, changed, rows = [], [], []
    for channel in channels:
        feed = feeds.get(channel.id)
        is_new = feed is None
        if feed is None:
            feed = AlertmanagerFeed(channel=channel)
        resend_s = int(channel.config.get("resend_s", RESEND_DEFAULT_S))
        outcome = step(feed.posted, feed.last_posted_at, current[channel.id], resolved_at,
                       resend_s, now)
        last = now if outcome.sends else feed.last_posted_at
        if (outcome.posted, last) != (feed.posted, feed.last_posted_at):
            feed.posted, feed.last_posted_at = outcome.posted, last
            (created if is_new else changed).append(feed)
        if outcome.sends:
            rows.append(feed_notification(channel, outcome.posted, now, external_url,
                                          give_up_at))
    AlertmanagerFeed.objects.bulk_create(created)
    AlertmanagerFeed.objects.bulk_update(changed, ["posted", "last_posted_at"])
    made = Notification.objects.bulk_create(rows)
    ids = [n.id for n in made]
    supersede({n.channel_id for n in made}, ids)
    prune({n.channel_id for n in made}, now)
    return ids


def feed_notification(channel: Channel, posted: dict[str, dict], now: datetime,
                      external_url: str, give_up_at: datetime) -> Notification:
    """A post of the feed. Its payload counts the alerts instead of holding them: the feed row
    holds them (``posted``), and each attempt posts what it holds then (``current``). A row
    per post with every alert would be megabytes each in a storm, one a minute."""
    firing = sum(a["status"] == "firing" for a in posted.values())
    status = "firing" if firing else "resolved"
    ident = uuid.uuid4()
    message = Message(id=str(ident), status=status, receiver=channel.name,
                      group_key=f"feed:{channel.id}", group_labels={}, alerts=[],
                      created_at=now, external_url=external_url)
    payload = {**message.to_dict(), "feed": {"firing": firing, "resolved": len(posted) - firing}}
    return Notification(uuid=ident, channel=channel, status=status, created_at=now,
                        next_attempt_at=now, give_up_at=give_up_at, payload=payload)


def current(row: Notification, message: Message) -> Message:
    """``message`` (a feed row's) with the alerts its feed holds now: an attempt always posts
    the feed's latest state, so a retry never undoes a newer post."""
    feed = AlertmanagerFeed.objects.filter(channel_id=row.channel_id).first()
    held = feed.posted if feed is not None else {}
    # Firing first, then resolved; by fingerprint within each: a stable body.
    order = sorted(held, key=lambda fp: (held[fp]["status"] != "firing", fp))
    return replace(message, alerts=[alert_from_dict(held[fp]) for fp in order])


def is_feed_post(row: Notification) -> bool:
    return not row.test and row.channel.kind in FEED_KINDS


def supersede(channel_ids: set[int], newest: list[int]) -> int:
    """The unsent rows of these feed channels older than the ones just written: superseded.
    A row in flight ("sending") is left to its worker; service.deliver checks again before
    any later attempt of it."""
    if not channel_ids:
        return 0
    return (Notification.objects
            .filter(channel_id__in=channel_ids, test=False,
                    state__in=[DeliveryState.PENDING, DeliveryState.RETRYING])
            .exclude(id__in=newest)
            .update(state=DeliveryState.SUPERSEDED, detail=SUPERSEDED_DETAIL))


def prune(channel_ids: set[int], now: datetime) -> int:
    """Delete these feed channels' rows sent or superseded before ``FEED_HISTORY`` ago."""
    if not channel_ids:
        return 0
    deleted, _ = (Notification.objects
                  .filter(channel_id__in=channel_ids, test=False,
                          state__in=[DeliveryState.SENT, DeliveryState.SUPERSEDED],
                          created_at__lt=now - FEED_HISTORY)
                  .delete())
    return deleted


def is_superseded(row: Notification) -> bool:
    """A newer row of the same feed channel exists: sending this one could undo it."""
    return (is_feed_post(row)
            and Notification.objects.filter(channel_id=row.channel_id, test=False,
                                            id__gt=row.id).exists())
