"""A real Alertmanager (Debian's 0.25) fed by Pitwall's real dispatch and delivery: it holds
Pitwall's alerts with their labels, its own route groups them to a webhook receiver, a
resolution in Pitwall resolves them there, a silence made in Alertmanager mutes them, and an
HA pair (two Alertmanagers, not clustered) both get every post; one down still delivers."""

from __future__ import annotations

import json
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import Channel, DeliveryState, Notification
from tests.alerts.delivery.helpers import cycle, fire, resolve
from tests.support.polling import wait_until
from tests.support.prometheus import Daemon, binary, get_json
from tests.support.receivers import Receiver

pytestmark = pytest.mark.slow

CONFIG = """\
route:
  receiver: hook
  group_by: [alertname]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {url}
        send_resolved: true
"""


class AlertmanagerServer(Daemon):
    """One Alertmanager on a free port, clustering off (``--cluster.listen-address=``)."""

    def __init__(self, workdir: Path, receiver_url: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "am.yml").write_text(CONFIG.format(url=receiver_url))
        super().__init__("alertmanager", [
            binary("prometheus-alertmanager"), f"--config.file={workdir / 'am.yml'}",
            f"--storage.path={workdir}", "--cluster.listen-address="], workdir)

    def alerts(self) -> dict[str, dict]:
        """host label -> the alert Alertmanager holds (GET /api/v2/alerts: active, silenced
        and inhibited ones)."""
        return {a["labels"].get("host", ""): a for a in get_json(f"{self.url}/api/v2/alerts")}

    def silence(self, label: str, value: str) -> str:
        now = timezone.now()
        body = {"matchers": [{"name": label, "value": value, "isRegex": False,
                              "isEqual": True}],
                "startsAt": now.isoformat(), "endsAt": (now + timedelta(hours=1)).isoformat(),
                "createdBy": "test", "comment": "maintenance"}
        request = urllib.request.Request(f"{self.url}/api/v2/silences",
                                         data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as reply:
            return json.loads(reply.read())["silenceID"]


@pytest.fixture
def alertmanager(tmp_path, receiver):
    server = AlertmanagerServer(tmp_path / "am", receiver.url)
    yield server
    server.stop()


def channel(*urls: str) -> Channel:
    return service.create_channel(name="alertmanager", kind="alertmanager_api",
                                  config={"urls": list(urls), "resend_s": 10,
                                          "external_labels": {"source": "pitwall"}})


def notifications(rec: Receiver, status: str | None = None) -> list[dict]:
    """What Alertmanager's webhook sent the receiver, of one status or all."""
    return [body for r in rec.requests
            if (body := r.json()) and (status is None or body["status"] == status)]


def hosts(notification: dict) -> set[str]:
    return {a["labels"]["host"] for a in notification["alerts"]}


def pass_now() -> list[Notification]:
    """One dispatch and delivery pass at the real time: Alertmanager keeps the real clock."""
    return cycle(timezone.now())


def test_pitwall_alerts_reach_alertmanager_are_grouped_resolved_and_silenced_there(
        db, allow_private, alertmanager, receiver):
    channel(alertmanager.url)
    alert = fire("KVCacheFull", "gpu-01", timezone.now())
    before = timezone.now()
    [row] = pass_now()
    after = timezone.now()
    assert row.state == DeliveryState.SENT, row.last_error

    held = wait_until(lambda: alertmanager.alerts().get("gpu-01"), 30,
                      lambda: f"Alertmanager holds {alertmanager.alerts()}")
    assert held["labels"] == {"alertname": "KVCacheFull", "severity": "critical",
                              "host": "gpu-01", "source": "pitwall"}
    assert held["annotations"]["summary"] == "KVCacheFull on gpu-01"
    assert held["status"]["state"] == "active"
    # It ends on its own 4 × resend_s (10 s) after the post unless Pitwall re-posts it.
    ends = datetime.fromisoformat(held["endsAt"])
    assert before + timedelta(seconds=39) < ends < after + timedelta(seconds=41)
    [firing] = wait_until(lambda: notifications(receiver, "firing"), 30,
                          lambda: f"the receiver got {notifications(receiver)}")
    assert firing["groupLabels"] == {"alertname": "KVCacheFull"}
    assert hosts(firing) == {"gpu-01"}

    resolve(alert, timezone.now())
    pass_now()
    resolved = wait_until(lambda: notifications(receiver, "resolved"), 30,
                          lambda: f"the receiver got {notifications(receiver)}")
    assert hosts(resolved[0]) == {"gpu-01"}

    # A silence made in Alertmanager: the silenced alert is held, suppressed, and left out of
    # its group's notification; its unsilenced neighbour in the same group goes out.
    silence = alertmanager.silence("host", "gpu-02")
    fire("GpuHot", "gpu-02", timezone.now())
    fire("GpuHot", "gpu-03", timezone.now())
    pass_now()
    hot = wait_until(lambda: [n for n in notifications(receiver, "firing")
                              if n["groupLabels"] == {"alertname": "GpuHot"}], 30,
                     lambda: f"the receiver got {notifications(receiver)}")
    state = alertmanager.alerts()["gpu-02"]["status"]
    assert (state["state"], state["silencedBy"]) == ("suppressed", [silence])
    assert all(hosts(n) == {"gpu-03"} for n in hot)
    assert not any("gpu-02" in hosts(n) for n in notifications(receiver))


def test_an_ha_pair_both_get_every_post_and_one_down_still_delivers(
        db, allow_private, tmp_path, receiver):
    first = AlertmanagerServer(tmp_path / "am-1", receiver.url)
    second = AlertmanagerServer(tmp_path / "am-2", receiver.url)
    try:
        channel(first.url, second.url)
        fire("KVCacheFull", "gpu-01", timezone.now())
        [row] = pass_now()
        assert row.detail.count("HTTP 200") == 2, row.detail
        for server in (first, second):
            wait_until(lambda s=server: "gpu-01" in s.alerts(), 30,
                       lambda s=server: f"{s.url} holds {s.alerts()}")

        second.stop()
        fire("EngineDown", "gpu-04", timezone.now())
        [row] = pass_now()
        assert row.state == DeliveryState.SENT, row.last_error
        one, two = row.detail.split("; ")
        assert one == f"127.0.0.1:{first.port} HTTP 200"
        assert two.startswith(f"127.0.0.1:{second.port} failed: connection failed")
        wait_until(lambda: "gpu-04" in first.alerts(), 30, lambda: f"{first.alerts()}")
        assert Channel.objects.get().last_ok
    finally:
        first.stop()
        second.stop()
