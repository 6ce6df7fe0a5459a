"""Services: a model on many replicas behind vLLM's router; their revisions, rollouts and
events. Every change goes through ``fleet.services`` (checks, placement, revisions, rollouts),
as the pages' do."""

from __future__ import annotations

from django.db.models import Prefetch
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.permissions import CanManageServices
from controlplane.api.serializers.deployments import RevertSerializer
from controlplane.api.serializers.services import (
    RolloutSerializer,
    ScaleDecisionSerializer,
    ServiceEventSerializer,
    ServiceRevisionSerializer,
    ServiceSerializer,
    with_code_check,
)
from controlplane.api.views.alerts import ERRORS
from controlplane.fleet import services
from controlplane.fleet.models import (
    Deployment,
    Rollout,
    RolloutState,
    ScaleDecision,
    Service,
    ServiceEvent,
    ServiceRevision,
)

REVISIONS_SHOWN = 100
ROLLOUTS_SHOWN = 50
EVENTS_SHOWN = 200  # the default; ?limit= takes 1 to EVENTS_MAX
EVENTS_MAX = 1000

CODE_403 = OpenApiResponse(description="a code-loading config, without fleet.deploy_code")


@extend_schema_view(
    create=extend_schema(responses={201: ServiceSerializer, 400: ERRORS, 403: CODE_403}),
    update=extend_schema(responses={200: ServiceSerializer, 400: ERRORS, 403: CODE_403}),
    partial_update=extend_schema(responses={200: ServiceSerializer, 400: ERRORS,
                                            403: CODE_403}),
    destroy=extend_schema(summary="Delete the service: its replicas drain and stop"),
)
class ServiceViewSet(viewsets.ModelViewSet):
    """Services: one model served by many replicas behind vLLM's router. Every role reads
    them; deployers create (fleet.add_service), change (fleet.change_service) and delete
    (fleet.delete_service) them. A change of what a replica runs rolls through the replicas;
    a change of ``replicas`` places or removes replicas."""

    serializer_class = ServiceSerializer
    permission_classes = [CanManageServices]
    lookup_value_converter = "int"

    def get_queryset(self):
        return Service.objects.select_related("router_host").prefetch_related(
            Prefetch("replica_set", to_attr="prefetched_replicas",
                     queryset=Deployment.objects.select_related("host")
                     .order_by("replica", "id")),
            Prefetch("rollouts", to_attr="running_rollouts",
                     queryset=Rollout.objects.filter(state=RolloutState.RUNNING)
                     .select_related("started_by").order_by("-started_at")),
        ).order_by("name")

    def perform_destroy(self, instance: Service) -> None:
        with_code_check(lambda: services.delete(instance, self.request.user))

    @extend_schema(summary="The service's revisions, newest first (100 at most)",
                   responses={200: ServiceRevisionSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)
    def revisions(self, request: Request, pk=None) -> Response:
        rows = (ServiceRevision.objects.filter(service=self.get_object())
                .select_related("author").order_by("-revision")[:REVISIONS_SHOWN])
        return Response(ServiceRevisionSerializer(rows, many=True).data)

    @extend_schema(summary="Back to an earlier revision's config, as a new revision",
                   request=RevertSerializer,
                   responses={200: ServiceSerializer, 400: ERRORS, 403: CODE_403})
    @action(detail=True, methods=["post"])
    def revert(self, request: Request, pk=None) -> Response:
        body = RevertSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        service = self.get_object()
        with_code_check(lambda: services.revert(
            service, body.validated_data["revision"], request.user,
            body.validated_data.get("reason", "")))
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(summary="The service's rollouts, newest first (50 at most)",
                   responses={200: RolloutSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)
    def rollouts(self, request: Request, pk=None) -> Response:
        rows = (Rollout.objects.filter(service=self.get_object())
                .select_related("started_by").order_by("-started_at", "-id")[:ROLLOUTS_SHOWN])
        return Response(RolloutSerializer(rows, many=True).data)

    @extend_schema(summary="What Pitwall did to the service and why, newest first",
                   parameters=[OpenApiParameter("limit", int, description=(
                       f"How many, 1 to {EVENTS_MAX} (default {EVENTS_SHOWN})"))],
                   responses={200: ServiceEventSerializer(many=True), 400: ERRORS})
    @action(detail=True, methods=["get"], pagination_class=None)
    def events(self, request: Request, pk=None) -> Response:
        limit = events_limit(request.query_params.get("limit"))
        rows = (ServiceEvent.objects.filter(service=self.get_object())
                .order_by("-at", "-id")[:limit])
        return Response(ServiceEventSerializer(rows, many=True).data)

    @extend_schema(summary="The autoscaler's decisions, newest first, with their evidence",
                   parameters=[OpenApiParameter("limit", int, description=(
                       f"How many, 1 to {EVENTS_MAX} (default {EVENTS_SHOWN})"))],
                   responses={200: ScaleDecisionSerializer(many=True), 400: ERRORS})
    @action(detail=True, methods=["get"], pagination_class=None)
    def scaling(self, request: Request, pk=None) -> Response:
        limit = events_limit(request.query_params.get("limit"))
        rows = (ScaleDecision.objects.filter(service=self.get_object())
                .select_related("deployment").order_by("-at", "-id")[:limit])
        return Response(ScaleDecisionSerializer(rows, many=True).data)


def events_limit(text: str | None) -> int:
    if text is None or text == "":
        return EVENTS_SHOWN
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or not (
            1 <= int(text) <= EVENTS_MAX):
        raise ValidationError({"limit": [f"a whole number from 1 to {EVENTS_MAX}"]})
    return int(text)
