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
from collections.abc import Iterable

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
FAIL_S = float(os.environ.get("PITWALL_FAULT_FAIL_S", 60))
SLOW_S = 10.0  # per request, once the receiver answers again
SLOW_WINDOW_S = 60.0  # alerts keep firing this long into the slow phase
FIRE_EVERY_S = 15.0
BASELINE_ALERTS = 5


def fire_paced(prefix: str, window_s: float, every_s: float) -> dict[str, float]:
    """An alert on a new host every ``every_s`` for ``window_s``; when each host's fired."""
    fired: dict[str, float] = {}
    started = time.monotonic()
    while time.monotonic() - started < window_s:
        host = f"{prefix}-{len(fired):02d}"
        fired[host] = time.time()
        fire_on([host], "WebhookFailingCase")
        time.sleep(max(0.0, started + len(fired) * every_s - time.monotonic()))
    return fired


def by_host(channel: Channel) -> dict[str, tuple[str, float | None]]:
    """Each host's notification on the channel: its id, and when its delivery was claimed."""
    rows = Notification.objects.filter(channel=channel).values_list(
        "group__group_labels", "uuid", "sent_at")
    return {labels["host"]: (str(uuid), sent and sent.timestamp()) for labels, uuid, sent in rows}


def mail_latencies(mail: Channel, inbox: TimedInbox, fired: dict[str, float]) -> list[float]:
    """Seconds from each alert's firing (written by the test) to its e-mail's arrival: the
    dispatch tick included, which a worker with no free slot would delay too."""
    return [inbox.arrived[uuid][0] - fired[host] for host, (uuid, _) in by_host(mail).items()
            if host in fired and uuid in inbox.arrived]


def held_back(mail: Channel, hook: Channel, inbox: TimedInbox, hosts: Iterable[str]) -> list[str]:
    """Those of ``hosts`` whose e-mail arrived only once the webhook's request of the same
    alert had been answered (SLOW_S after its claim): an e-mail that waited for the slow
    receiver."""
    mails, hooks = by_host(mail), by_host(hook)
    return [host for host in hosts if (sent := hooks[host][1])
            and inbox.arrived[mails[host][0]][0] >= sent + SLOW_S]


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

        healthy_fired = fire_paced("base", BASELINE_ALERTS * 3.0, 3.0)  # the webhook healthy
        settle(hook, mail, timeout=120)
        healthy = len(receiver.requests)
        ok_again, slow_at, failing_fired, slow_fired = fail_then_slow(receiver)
        settle(hook, mail, timeout=900)
        recovery_s = time.time() - slow_at
        accepted = receiver.requests[:healthy] + receiver.requests[ok_again:]
        failed_requests = ok_again - healthy
        hook_tally = Tally(ids_of(hook), Counter(r.headers[ID_HEADER] for r in accepted))
        mail_tally = Tally(ids_of(mail), Counter({k: len(v) for k, v in inbox.arrived.items()}))
        baseline = mail_latencies(mail, inbox, healthy_fired)
        faulted = mail_latencies(mail, inbox, failing_fired | slow_fired)
        late = held_back(mail, hook, inbox, slow_fired)

    figures = (f"e-mail latency (alert written to mail received) p50/max: "
               f"{percentile(baseline, 0.5):.2f}/{max(baseline):.2f} s "
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


def fail_then_slow(receiver: Receiver) -> tuple[int, float, dict[str, float], dict[str, float]]:
    """The fault, with alerts firing through it: 500 for FAIL_S, then SLOW_S a request. The
    index of the first request answered 200 again, when the receiver turned slow, and the
    alerts fired in each phase."""
    receiver.status, receiver.reply = 500, b"upstream unavailable"
    failing_fired = fire_paced("fail", FAIL_S, FIRE_EVERY_S)
    ok_again, slow_at = len(receiver.requests), time.time()
    receiver.delay, receiver.reply, receiver.status = SLOW_S, b"ok", 200
    slow_fired = fire_paced("slow", SLOW_WINDOW_S, FIRE_EVERY_S)
    return ok_again, slow_at, failing_fired, slow_fired
