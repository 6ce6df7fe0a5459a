"""Case 5: the Celery worker killed with SIGKILL (its pool with it, as systemd's control group
would) while it delivers notifications, and started again at once. The receiver is slow (2 s
per request) so the kill lands mid-attempt: that row stays claimed until its lease runs out,
then goes again with the same id; the channel's turn (a session advisory lock) dies with the
killed worker's session, so the other rows go on at once. Every notification is delivered,
repeats are counted by id (a receiver drops them by it)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

from tests.faults.harness import record
from tests.faults.notifying import (
    ID_HEADER,
    STACK_ENV,
    Tally,
    fire_on,
    ids_of,
    route_each_alert,
    states,
    unsent,
    webhook_channel,
)
from tests.support.polling import wait_until
from tests.support.receivers import serving

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]
NOTIFICATIONS = int(os.environ.get("PITWALL_FAULT_NOTIFICATIONS", 24))
RECEIVER_DELAY_S = 2.0
# Shortened for the case (production: 2 min, or 4 attempt timeouts): the killed attempt's row
# goes again this long after its claim. It must exceed the timeout by 10 s (service.lease_s).
TIMEOUT_S, LEASE_S = 5, 20


def test_a_worker_killed_mid_delivery_loses_no_notification(stack, settings):
    settings.PITWALL = {**settings.PITWALL, "ALERT_ALLOW_PRIVATE_WEBHOOKS": True}
    stack.configure(**STACK_ENV, PITWALL_ALERT_DELIVERY_TIMEOUT_S=str(TIMEOUT_S),
                    PITWALL_ALERT_DELIVERY_LEASE_S=str(LEASE_S))
    with serving() as receiver:
        receiver.delay = RECEIVER_DELAY_S
        channel = webhook_channel(receiver.url)
        route_each_alert(channel)
        fire_on([f"gpu-{i:03d}" for i in range(NOTIFICATIONS)], "WorkerKilledCase")
        stack.start_worker()
        stack.start_beat()
        # A third delivered, the next one in flight: the receiver holds it for 2 s.
        wait_until(lambda: len(receiver.requests) > NOTIFICATIONS // 3, 300,
                   lambda: f"{len(receiver.requests)} requests:\n{stack.log('worker')[-3000:]}")
        stack.kill("worker", signal.SIGKILL)
        killed_at = time.monotonic()
        in_flight = receiver.requests[-1].headers[ID_HEADER]
        before_kill = len(receiver.requests)
        stack.start_worker()  # Restart=always
        wait_until(lambda: len(receiver.requests) > before_kill, 120,
                   lambda: f"nothing after the restart:\n{stack.log('worker')[-3000:]}")
        resumed_s = time.monotonic() - killed_at
        wait_until(lambda: unsent(channel) == 0, 600,
                   lambda: f"{states(channel)}:\n{stack.log('worker')[-3000:]}")
        recovery_s = time.monotonic() - killed_at
        tally = Tally(ids_of(channel), Counter(r.headers[ID_HEADER] for r in receiver.requests))

    record("5. worker killed mid-delivery", injected="Celery worker SIGKILL (pool included) "
           "mid-attempt, restarted at once", duration_s=recovery_s, unit="notifications",
           expected=len(tally.expected), stored=tally.delivered, lost=tally.lost,
           duplicated=tally.repeats, recovery_s=recovery_s,
           notes=f"webhook receiver at {RECEIVER_DELAY_S:g} s a request; lease {LEASE_S} s "
                 f"(timeout {TIMEOUT_S} s); deliveries went on {resumed_s:.1f} s after the "
                 f"kill; the attempt in flight went again after its lease with the same id "
                 f"({tally.repeats} repeat(s) by id, dropped by the receiver); recovery: "
                 "from the kill until every notification was delivered")
    assert len(tally.expected) == NOTIFICATIONS
    assert tally.lost == 0
    # Only the attempt in flight at the kill may go twice, and it does with its own id.
    assert set(tally.repeated_ids) <= {in_flight} and tally.repeats <= 1
    assert tally.accepted[in_flight] >= 1
