"""Case 6: a webhook receiver fails (HTTP 500) for two minutes, then answers slowly (10 s a
request), while alerts keep firing. Every webhook notification is delivered once by its id in
the end (retries with backoff, then one request at a time on the slow receiver, which the
30-s attempt timeout lets succeed). An e-mail channel beside it (a real aiosmtpd) is not held
back: its delivery latency is measured against a baseline run with a healthy webhook, and every
e-mail of the slow phase arrives before the webhook's answer to the same alert."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable

import pytest

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import Channel, Notification
from tests.faults.harness import record
from tests.faults.notifying import (
    ID_HEADER,
    STACK_ENV,
    Tally,
    TimedInbox,
    email_env,
    fire_on,
    ids_of,
    percentile,
    route_each_alert,
    smtp_server,
    states,
    unsent,
    webhook_channel,
)
from tests.support.polling import wait_until
from tests.support.receivers import Receiver, serving

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]
FAIL_S = float(os.environ.get("PITWALL_FAULT_FAIL_S", 120))
SLOW_S = 10.0  # per request, once the receiver answers again
SLOW_WINDOW_S = 60.0  # alerts keep firing this long into the slow phase
FIRE_EVERY_S = 15.0
BASELINE_ALERTS = 5


def fire_paced(prefix: str, window_s: float, every_s: float) -> list[str]:
    """An alert on a new host every ``every_s`` for ``window_s``; the hosts."""
    hosts: list[str] = []
    started = time.monotonic()
    while time.monotonic() - started < window_s:
        hosts.append(f"{prefix}-{len(hosts):02d}")
        fire_on(hosts[-1:], "WebhookFailingCase")
        time.sleep(max(0.0, started + len(hosts) * every_s - time.monotonic()))
    return hosts


def mail_latencies(mail: Channel, inbox: TimedInbox,
                   keep: Callable[[float], bool]) -> list[float]:
    """Seconds from each e-mail row's creation to its arrival, for rows created when ``keep``."""
    rows = Notification.objects.filter(channel=mail).values_list("uuid", "created_at")
    return [inbox.arrived[str(uuid)][0] - created.timestamp() for uuid, created in rows
            if keep(created.timestamp()) and str(uuid) in inbox.arrived]


def held_back(mail: Channel, hook: Channel, inbox: TimedInbox, since: float) -> list[str]:
    """Hosts whose e-mail (created after ``since``) arrived only once the webhook's request of
    the same alert had been answered: an e-mail that waited for the slow receiver."""
    def by_host(channel: Channel) -> dict[str, tuple[str, float, float | None]]:
        rows = Notification.objects.filter(channel=channel).values_list(
            "group__group_labels", "uuid", "created_at", "sent_at")
        return {labels["host"]: (str(uuid), created.timestamp(), sent and sent.timestamp())
                for labels, uuid, created, sent in rows}

    hooks, late = by_host(hook), []
    for host, (uuid, created, _) in by_host(mail).items():
        hook_sent = hooks[host][2]
        if created >= since and hook_sent and inbox.arrived[uuid][0] >= hook_sent + SLOW_S:
            late.append(host)
    return late


def settle(*channels: Channel, timeout: float) -> None:
    wait_until(lambda: all(unsent(c) == 0 for c in channels), timeout,
               lambda: f"{[states(c) for c in channels]}")


def test_a_failing_then_slow_webhook_gets_everything_and_does_not_delay_email(stack, settings):
    settings.PITWALL = {**settings.PITWALL, "ALERT_ALLOW_PRIVATE_WEBHOOKS": True}
    with serving() as receiver, smtp_server() as (inbox, smtp_port):
        stack.configure(**STACK_ENV, **email_env(smtp_port))
        hook = webhook_channel(receiver.url)
        mail = service.create_channel(name="mail", kind="email",
                                      config={"to": ["oncall@example.com"]})
        route_each_alert(hook, mail)
        stack.start_worker()
        stack.start_beat()

        fire_paced("base", BASELINE_ALERTS * 3.0, 3.0)  # the webhook healthy
        settle(hook, mail, timeout=120)
        fault_at, healthy = time.time(), len(receiver.requests)
        ok_again, slow_at = fail_then_slow(receiver)
        settle(hook, mail, timeout=900)
        recovery_s = time.time() - slow_at
        accepted = receiver.requests[:healthy] + receiver.requests[ok_again:]
        failed_requests = ok_again - healthy
        hook_tally = Tally(ids_of(hook), Counter(r.headers[ID_HEADER] for r in accepted))
        mail_tally = Tally(ids_of(mail), Counter({k: len(v) for k, v in inbox.arrived.items()}))
        baseline = mail_latencies(mail, inbox, lambda created: created < fault_at)
        faulted = mail_latencies(mail, inbox, lambda created: created >= fault_at)
        late = held_back(mail, hook, inbox, slow_at)

    figures = (f"e-mail latency p50/max: {percentile(baseline, 0.5):.2f}/{max(baseline):.2f} s "
               f"with a healthy webhook ({len(baseline)} mails), "
               f"{percentile(faulted, 0.5):.2f}/{max(faulted):.2f} s beside the bad one "
               f"({len(faulted)} mails)")
    record("6. webhook failing, then slow", injected=f"webhook HTTP 500 for {FAIL_S:g} s, then "
           f"{SLOW_S:g} s a request", duration_s=FAIL_S, unit="notifications",
           expected=len(hook_tally.expected), stored=hook_tally.delivered, lost=hook_tally.lost,
           duplicated=hook_tally.repeats, recovery_s=recovery_s,
           notes=f"{figures}; {failed_requests} requests answered 500; e-mails: "
                 f"{mail_tally.delivered}/{len(mail_tally.expected)} delivered, "
                 f"{mail_tally.repeats} repeats; recovery: from the receiver's first 200 until "
                 "every webhook notification was delivered",
           email_latency_baseline_s=[round(v, 3) for v in sorted(baseline)],
           email_latency_faulted_s=[round(v, 3) for v in sorted(faulted)])
    assert hook_tally.lost == 0 and hook_tally.repeats == 0
    assert mail_tally.lost == 0 and mail_tally.repeats == 0
    # It did fail: every alert of the failing phase got a 500 at least once.
    assert failed_requests >= int(FAIL_S // FIRE_EVERY_S)
    assert late == []  # no e-mail waited for the slow webhook's answer


def fail_then_slow(receiver: Receiver) -> tuple[int, float]:
    """The fault, with alerts firing through it: 500 for FAIL_S, then SLOW_S a request. The
    index of the first request answered 200 again, and when the receiver turned slow."""
    receiver.status, receiver.reply = 500, b"upstream unavailable"
    fire_paced("fail", FAIL_S, FIRE_EVERY_S)
    ok_again, slow_at = len(receiver.requests), time.time()
    receiver.delay, receiver.reply, receiver.status = SLOW_S, b"ok", 200
    fire_paced("slow", SLOW_WINDOW_S, FIRE_EVERY_S)
    return ok_again, slow_at
