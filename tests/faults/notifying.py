"""What the notification cases (5: worker killed, 6: webhook failing) share: channels and a
route that gives every firing alert a notification of its own, firing alerts written straight
into the Alert table (no fleet: the cases are about delivery), a real SMTP inbox that notes
when each mail arrived, and the count of what receivers got, by notification id."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from aiosmtpd.controller import Controller
from django.utils import timezone

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import Channel, DeliveryState, Notification, Route
from tests.alerts.delivery.helpers import fire
from tests.support.live import free_port
from tests.support.receivers import Inbox

ID_HEADER = "X-Pitwall-Notification-Id"
# The stack's settings for these cases: dispatch and deliver_due every second; no rule
# evaluation in the run (the alerts are written by the test and no fleet reports: an
# evaluation would resolve them).
STACK_ENV = {"PITWALL_ALERT_DISPATCH_INTERVAL_S": "1", "PITWALL_ALERT_EVAL_INTERVAL_S": "3600"}


def route_each_alert(*channels: Channel) -> Route:
    """A notification per alert and channel, at once (no group wait)."""
    route = Route.objects.create(name="every-alert", group_by=["alertname", "host"],
                                 group_wait_s=0)
    route.channels.set(channels)
    return route


def fire_on(hosts: Iterable[str], alertname: str) -> None:
    for host in hosts:
        fire(alertname, host, timezone.now())


def webhook_channel(url: str) -> Channel:
    return service.create_channel(name="hook", kind="webhook",
                                  config={"url": url, "secret": "whsec-faults-h2"})


@dataclass
class Tally:
    """Notifications (rows) against what a receiver accepted, by id."""

    expected: set[str]
    accepted: Counter[str] = field(default_factory=Counter)

    @property
    def delivered(self) -> int:
        return len(self.expected & set(self.accepted))

    @property
    def lost(self) -> int:
        return len(self.expected - set(self.accepted))

    @property
    def repeats(self) -> int:
        return sum(count - 1 for count in self.accepted.values() if count > 1)

    @property
    def repeated_ids(self) -> list[str]:
        return sorted(id_ for id_, count in self.accepted.items() if count > 1)


def ids_of(channel: Channel) -> set[str]:
    return {str(u) for u in Notification.objects.filter(channel=channel)
            .values_list("uuid", flat=True)}


def unsent(channel: Channel) -> int:
    return Notification.objects.filter(channel=channel).exclude(state=DeliveryState.SENT).count()


def states(channel: Channel) -> dict[str, int]:
    return dict(Counter(Notification.objects.filter(channel=channel)
                        .values_list("state", flat=True)))


class TimedInbox(Inbox):
    """An Inbox that notes each mail's arrival (wall clock) by its notification id."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: dict[str, list[float]] = {}

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802
        reply = await super().handle_DATA(server, session, envelope)
        mail = self.messages[-1]
        self.arrived.setdefault(str(mail[ID_HEADER]), []).append(time.time())
        return reply


@contextmanager
def smtp_server() -> Iterator[tuple[TimedInbox, int]]:
    inbox = TimedInbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield inbox, controller.port
    finally:
        controller.stop()


def email_env(port: int) -> dict[str, str]:
    return {"EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(port),
            "DEFAULT_FROM_EMAIL": "pitwall@example.com"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")
