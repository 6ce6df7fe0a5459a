"""Deployments: desired vLLM configs with their revisions; the agent's config and status."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api.auth import AgentTokenAuthentication
from controlplane.api.permissions import CanManageDeployments, IsAgent
from controlplane.api.serializers.alerts import drf_errors
from controlplane.api.serializers.deployments import (
    AgentConfigSerializer,
    AgentStatusSerializer,
    DeploymentRevisionSerializer,
    DeploymentSerializer,
    RevertSerializer,
)
from controlplane.api.views.alerts import ERRORS, write_responses
from controlplane.fleet import deployments, routing
from controlplane.fleet.models import Deployment, DeploymentRevision

REVISIONS_SHOWN = 100


@extend_schema_view(**write_responses(DeploymentSerializer))
class DeploymentViewSet(viewsets.ModelViewSet):
    """vLLM instances the agents run. Every active user reads them; staff users create, change
    and delete them. Each change is a revision (who, when, why) that the host's agent applies
    by a graceful restart."""

    serializer_class = DeploymentSerializer
    permission_classes = [CanManageDeployments]
    lookup_value_converter = "int"
    filterset_fields = ["host", "enabled", "state"]

    def get_queryset(self):
        return Deployment.objects.select_related("host").order_by("id")

    def perform_destroy(self, instance: Deployment) -> None:
        try:
            deployments.delete(instance)
        except DjangoValidationError as exc:  # a service's replica: 400 naming the service
            raise drf_errors(exc) from None

    @extend_schema(summary="The deployment's revisions, newest first (100 at most)",
                   responses={200: DeploymentRevisionSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None, filterset_fields=[])
    def revisions(self, request: Request, pk=None) -> Response:
        rows = (DeploymentRevision.objects.filter(deployment=self.get_object())
                .select_related("author").order_by("-revision")[:REVISIONS_SHOWN])
        return Response(DeploymentRevisionSerializer(rows, many=True).data)

    @extend_schema(summary="Back to an earlier revision's config, as a new revision",
                   request=RevertSerializer, responses={
                       200: DeploymentSerializer, 400: ERRORS,
                       403: OpenApiResponse(description="a code-loading config, without "
                                                        "fleet.deploy_code")})
    @action(detail=True, methods=["post"], filterset_fields=[])
    def revert(self, request: Request, pk=None) -> Response:
        body = RevertSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        deployment = self.get_object()
        try:
            deployments.revert(deployment, body.validated_data["revision"], request.user,
                               body.validated_data.get("reason", ""))
        except deployments.CodeNotPermitted as exc:
            raise PermissionDenied(exc.message_dict) from None
        except DjangoValidationError as exc:
            raise drf_errors(exc) from None
        return Response(self.get_serializer(deployment).data)


class AgentConfigView(APIView):
    """The agent's desired config: its host's enabled deployments. An agent fetches it at
    start and whenever an ingest reply's config_version differs from the one it runs."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]

    @extend_schema(summary="The desired deployments of the token's host",
                   responses={200: AgentConfigSerializer})
    def get(self, request: Request) -> Response:
        return Response(deployments.agent_config(request.user.host_id))


class AgentStatusView(APIView):
    """What the agent's supervisor reports of each deployment (state, flags, log tail) and,
    on a router host, of each service's router (state, workers, request counts)."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]

    @extend_schema(summary="Report the state of the token's host's deployments and routers",
                   request=AgentStatusSerializer,
                   responses={200: OpenApiResponse(description='{"stored": n} (and '
                                                               '"routers": n when it sent '
                                                               'routers)'),
                              400: ERRORS,
                              403: OpenApiResponse(description="another host's deployment, or "
                                                               "a service another host routes")})
    def post(self, request: Request) -> Response:
        body = AgentStatusSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        host_id = request.user.host_id
        try:
            # one transaction: a refused report stores nothing, neither half
            with transaction.atomic():
                stored = deployments.record_status(host_id, body.validated_data["deployments"])
                routers = routing.record_router_status(
                    host_id, body.validated_data.get("routers", []))
        except deployments.ForeignDeployment as exc:
            raise PermissionDenied(str(exc)) from None
        reply = {"stored": stored}
        if "routers" in body.validated_data:
            reply["routers"] = routers
        return Response(reply, status=status.HTTP_200_OK)


