"""A hot GPU pages a real webhook receiver through the real Celery beat and worker.

Beat, worker and a private Redis broker run as subprocesses on the test database, with the
evaluation every second (``PITWALL_ALERT_EVAL_INTERVAL_S``); dispatch and delivery keep their
5 s beat ticks. Samples are written as time passes, stamped with the real clock. A GPU runs hot:
its rule fires and the receiver gets a signed ``firing`` webhook; the GPU cools: a ``resolved``
one follows. A second rule fires on the same GPU under a silence and sends nothing.

The signature is checked with the snippet receivers are told to copy (docs/webhooks.md), read
from the page itself, never with the server's own signing code.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import DeliveryState, Notification, Route
from controlplane.alerts.models import AlertEvent, AlertRule
from controlplane.alerts.silences import create_silence
from controlplane.fleet.models import Gpu, Host
from controlplane.telemetry import partitions
from controlplane.telemetry.schema import TABLES
from tests.support.live import (
    ROOT,
    HookReceiver,
    RedisServer,
    celery_worker_and_beat,
    server_env,
)
from tests.support.polling import wait_until

# Real processes or minutes of work: `make test` runs them, `make test-fast` leaves them
# out; seconds: about what each test takes (slow tests start first, the longest first).
pytestmark = pytest.mark.slow(seconds=25)

SECRET = "whsec-e2e-celery-7d41"
HOT, SILENCED = "E2E GPU hot", "E2E GPU power (silenced)"


def docs_verifier():
    """``verify_pitwall_signature`` exactly as docs/webhooks.md prints it."""
    page = (ROOT / "docs/webhooks.md").read_text()
    code = next(block for block in re.findall(r"```python\n(.*?)```", page, re.S)
                if "def verify_pitwall_signature" in block)
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 -- our own documentation, under test
    return namespace["verify_pitwall_signature"]


class Feed:
    """One GPU row a second stamped with the real clock, as an agent would send them."""

    def __init__(self, gpu: Gpu) -> None:
        self.gpu, self.last = gpu, 0.0
        self.table = TABLES["gpu"].name

    def tick(self, temp_c: float, power_w: float) -> None:
        now = time.time()
        if now - self.last < 1.0:
            return
        self.last = now
        ts = datetime.fromtimestamp(now, UTC)
        with connection.cursor() as cursor:
            partitions.ensure(cursor, {ts.date(), (ts + timedelta(minutes=5)).date()})
            cursor.execute(f"INSERT INTO {self.table} (gpu_id, ts, temp_c, power_w) "
                           "VALUES (%s, %s, %s, %s)", [self.gpu.id, ts, temp_c, power_w])


def alertnames(post: dict) -> set[str]:
    return {a["labels"]["alertname"] for a in json.loads(post["body"])["alerts"]}


def status_of(post: dict) -> str:
    return json.loads(post["body"])["status"]


def make_rules() -> None:
    # The default pack is loaded in every test database; only this test's rules run here.
    AlertRule.objects.update(enabled=False)
    for name, metric, threshold in [(HOT, "gpu.temp_c", 85), (SILENCED, "gpu.power_w", 600)]:
        rule = AlertRule(name=name, metric=metric, aggregation="max", window_s=5, op=">",
                         threshold=threshold, for_s=4, severity="critical",
                         summary="{host} GPU {gpu_index}: {value:.0f}")
        rule.full_clean()
        rule.save()


def make_route(receiver: HookReceiver) -> None:
    channel = service.create_channel(name="e2e-oncall", kind="webhook",
                                     config={"url": receiver.url, "secret": SECRET})
    route = Route(name="e2e", matchers=[{"label": "alertname", "op": "=~", "value": "E2E .*"}],
                  group_wait_s=1, group_interval_s=1, repeat_interval_s=3600)
    route.full_clean()
    route.save()
    route.channels.set([channel])
    now = datetime.now(UTC)
    create_silence(matchers=[{"label": "alertname", "op": "=", "value": SILENCED}],
                   starts_at=now - timedelta(minutes=1), ends_at=now + timedelta(hours=1),
                   author="e2e", comment="planned maintenance of the power supply")


def test_a_hot_gpu_pages_a_signed_webhook_then_resolves_and_a_silenced_alert_stays_quiet(
        empty_samples, tmp_path):
    host = Host.objects.create(hostname="celery-alert-host")
    gpu = Gpu.objects.create(host=host, index=0, uuid="GPU-celery-alert-0")
    make_rules()
    receiver = HookReceiver().start()
    make_route(receiver)
    broker = RedisServer(tmp_path)
    broker.start()
    env = {**server_env(), "REDIS_URL": broker.url, "CELERY_BROKER_URL": broker.url,
           "PITWALL_ALERT_EVAL_INTERVAL_S": "1", "PITWALL_ALERT_ALLOW_PRIVATE_WEBHOOKS": "true"}
    worker, beat = celery_worker_and_beat(env, tmp_path)
    feed = Feed(gpu)

    def sent(status: str):
        feed.tick(*((95.0, 700.0) if status == "firing" else (50.0, 300.0)))
        return next((p for p in receiver.posts if status_of(p) == status), None)

    def explain(what: str):
        return lambda: (f"no {what} webhook; received {[p['body'] for p in receiver.posts]}\n"
                        f"{worker.output()}\n{beat.output()}")

    try:
        firing = wait_until(lambda: sent("firing"), 60, explain("firing"))
        resolved = wait_until(lambda: sent("resolved"), 60, explain("resolved"))
    finally:
        beat.stop()
        worker.stop()
        broker.stop()
        receiver.stop()

    verify = docs_verifier()
    for post in (firing, resolved):
        body = json.loads(post["body"])
        assert post["headers"]["Content-Type"].startswith("application/json")
        assert verify(SECRET, post["headers"], post["body"])
        assert not verify(SECRET, post["headers"], post["body"] + b" ")
        assert not verify("another-secret", post["headers"], post["body"])
        assert post["headers"]["X-Pitwall-Notification-Id"] == body["id"]
        row = Notification.objects.get(uuid=body["id"])
        assert (row.state, row.status) == (DeliveryState.SENT, body["status"])
        assert alertnames(post) == {HOT}
    fired, ended = json.loads(firing["body"]), json.loads(resolved["body"])
    assert fired["id"] != ended["id"]
    assert [(a["status"], a["ends_at"]) for a in fired["alerts"]] == [("firing", None)]
    assert fired["common_labels"]["host"] == "celery-alert-host"
    assert [a["status"] for a in ended["alerts"]] == ["resolved"]
    assert ended["alerts"][0]["ends_at"] is not None
    assert ended["alerts"][0]["fingerprint"] == fired["alerts"][0]["fingerprint"]

    # The silenced rule fired and resolved alongside, and nothing was sent for it.
    moves = set(AlertEvent.objects.filter(alert__rule__name=SILENCED)
                .values_list("from_state", "to_state"))
    assert {("pending", "firing"), ("firing", "resolved")} <= moves
    assert not [p for p in receiver.posts if SILENCED in alertnames(p)]
    assert not Notification.objects.filter(payload__group_labels__alertname=SILENCED).exists()
