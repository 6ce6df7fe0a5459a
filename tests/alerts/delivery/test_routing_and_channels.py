"""Routes by severity and labels, the default route, channel configuration."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import Channel, Notification, Route
from tests.alerts.delivery.helpers import SECRET, at, cycle, fire


@pytest.fixture
def pager(db, receiver, allow_private) -> Channel:
    return service.create_channel(name="pager", kind="alertmanager_webhook",
                                  config={"url": receiver.url})


def channels_notified() -> list[tuple[str, str]]:
    return sorted((n.channel.name, n.payload["group_labels"]["alertname"])
                  for n in Notification.objects.select_related("channel"))


def test_alerts_go_to_the_routes_whose_severity_and_matchers_match(webhook, pager):
    route = Route.objects.create(name="critical gpu-01", severities=["critical"],
                                 matchers=[{"label": "host", "op": "=~", "value": "gpu-0[1]"}])
    route.channels.add(pager)
    fire("KVCacheFull", "gpu-01", severity="critical")
    fire("EngineDown", "gpu-02", severity="critical")
    fire("GpuHot", "gpu-01", severity="warning")

    cycle(at(30))

    # The two that match no route go to every enabled channel (the default route).
    assert channels_notified() == [
        ("oncall", "EngineDown"), ("oncall", "GpuHot"),
        ("pager", "EngineDown"), ("pager", "GpuHot"), ("pager", "KVCacheFull")]


def test_a_disabled_channel_gets_nothing(webhook, pager):
    service.disable_channel(pager, "switched off by hand", at(0))
    fire("KVCacheFull")

    cycle(at(30))

    assert channels_notified() == [("oncall", "KVCacheFull")]


def test_a_route_takes_its_own_timers(webhook):
    route = Route.objects.create(name="fast", group_wait_s=0)
    route.channels.add(webhook)
    fire("KVCacheFull", now=at(0))

    assert len(cycle(at(1))) == 1


def test_a_channel_config_is_checked_by_its_transport_without_echoing_the_secret(db):
    with pytest.raises(ValidationError) as caught:
        service.create_channel(name="hook", kind="webhook",
                               config={"url": "ftp://example.com", "secret": SECRET})

    assert "config" in caught.value.message_dict
    assert SECRET not in str(caught.value)
    assert not Channel.objects.exists()


def test_an_unknown_kind_is_refused(db):
    with pytest.raises(ValidationError) as caught:
        service.create_channel(name="pigeon", kind="pigeon", config={})

    assert "kind" in caught.value.message_dict


def test_a_route_with_a_bad_matcher_is_refused(db):
    route = Route(name="bad", matchers=[{"label": "colour", "op": "=", "value": "x"}])

    with pytest.raises(ValidationError):
        route.full_clean()


def test_a_channel_never_shows_its_config_when_printed(webhook):
    assert SECRET not in str(webhook) and SECRET not in repr(webhook)


def test_enabling_a_channel_clears_the_reason(webhook):
    service.disable_channel(webhook, "HTTP 404: gone", at(0))
    service.enable_channel(webhook)

    webhook.refresh_from_db()
    assert (webhook.enabled, webhook.disabled_reason, webhook.disabled_at) == (True, "", None)
