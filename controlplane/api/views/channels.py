"""Notification channels (config write-only; test, enable, disable) and notifications."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import Channel, Notification
from controlplane.api.filters import NotificationFilter
from controlplane.api.permissions import CanManageChannels, needs
from controlplane.api.serializers.channels import (
    ChannelSerializer,
    DisableSerializer,
    NotificationDetailSerializer,
    NotificationSerializer,
)
from controlplane.api.views.alerts import ERRORS, write_responses


@extend_schema_view(**write_responses(ChannelSerializer))
class ChannelViewSet(viewsets.ModelViewSet):
    """Where notifications go. The config (webhook secrets, URLs with tokens) is write-only:
    responses show config_redacted, never the config itself."""

    queryset = Channel.objects.order_by("name")
    serializer_class = ChannelSerializer
    permission_classes = [CanManageChannels]
    lookup_value_converter = "int"

    @extend_schema(
        summary="Send a test notification now and return its delivery row",
        description=(
            "One attempt, made within the request (bounded by the transport's 10 s timeout), "
            "so the answer says at once whether the channel works: state sent with detail, or "
            "failed with last_error. A test is never retried and a failed test does not "
            "disable the channel."),
        request=None,
        responses={200: NotificationDetailSerializer},
    )
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: int) -> Response:
        row = service.send_test(self.get_object())
        row = Notification.objects.select_related("channel").get(id=row.id)
        return Response(NotificationDetailSerializer(row).data)

    @extend_schema(summary="Switch a channel back on, clearing the reason it was disabled",
                   request=None, responses={200: ChannelSerializer})
    @action(detail=True, methods=["post"])
    def enable(self, request: Request, pk: int) -> Response:
        channel = self.get_object()
        service.enable_channel(channel)
        return Response(self.get_serializer(channel).data)

    @extend_schema(summary="Switch a channel off; its queued notifications fail with it",
                   request=DisableSerializer, responses={200: ChannelSerializer, 400: ERRORS})
    @action(detail=True, methods=["post"])
    def disable(self, request: Request, pk: int) -> Response:
        channel = self.get_object()
        body = DisableSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        service.disable_channel(channel, body.validated_data["reason"])
        return Response(self.get_serializer(channel).data)


@extend_schema_view(retrieve=extend_schema(responses=NotificationDetailSerializer))
class NotificationViewSet(viewsets.ReadOnlyModelViewSet):
    """Every notification and its delivery attempts so far, newest first; the payload is
    on the detail route only."""

    permission_classes = [needs("alerts.view_notification", name="CanReadNotifications")]
    filterset_class = NotificationFilter
    lookup_value_converter = "int"

    def get_queryset(self):
        rows = Notification.objects.select_related("channel").order_by("-created_at", "-id")
        # The payload (every alert of the message) is the bulk of a row: the list leaves it.
        return rows.defer("payload") if self.action == "list" else rows

    def get_serializer_class(self):
        if self.action == "list":
            return NotificationSerializer
        return NotificationDetailSerializer
