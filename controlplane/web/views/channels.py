"""Notification channels: last delivery status, recent notifications, test and re-enable.

A channel's config holds secrets (webhook secrets, URLs with tokens): no page renders it."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import Channel, DeliveryState, Notification
from controlplane.web.views.access import needs

channels_access = needs("alerts.view_channel", "alerts.change_channel")

RECENT_NOTIFICATIONS = 10


def recent_notifications(channel: Channel) -> list[Notification]:
    return list(channel.notifications.only(
        "uuid", "channel_id", "test", "status", "state", "attempts", "created_at",
        "last_attempt_at", "last_error", "detail").order_by("-created_at", "-id")
        [:RECENT_NOTIFICATIONS])


@channels_access
def channels(request: HttpRequest) -> HttpResponse:
    rows = [(c, recent_notifications(c)) for c in Channel.objects.defer("config")
            .prefetch_related("routes")]
    return render(request, "web/alerts/channels.html", {
        "rows": rows,
        "can_edit": request.user.has_perm("alerts.change_channel"), "tab": "channels"})


@channels_access
@require_POST
def channel_test(request: HttpRequest, channel_id: int) -> HttpResponse:
    """One attempt now, in the request (each transport waits PITWALL_ALERT_DELIVERY_TIMEOUT_S at
    most); the outcome is shown."""
    channel = get_object_or_404(Channel, pk=channel_id)
    row = service.send_test(channel)
    if row.state == DeliveryState.SENT:
        messages.success(request, f"Test notification to {channel.name} sent: {row.detail}")
    else:
        messages.error(request, f"Test notification to {channel.name} failed: "
                                f"{row.last_error or row.state}")
    return redirect(f"{reverse('web:channels')}#channel-{channel.id}")


@channels_access
@require_POST
def channel_enable(request: HttpRequest, channel_id: int) -> HttpResponse:
    channel = get_object_or_404(Channel, pk=channel_id)
    service.enable_channel(channel)
    messages.success(request, f"Channel {channel.name} enabled.")
    return redirect(f"{reverse('web:channels')}#channel-{channel.id}")
