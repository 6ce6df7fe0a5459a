"""Tokens: each user lists, creates and revokes their own API tokens; admins see and revoke
everyone's, and the hosts' agent tokens."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.permissions import SignedIn, needs
from controlplane.api.serializers.tokens import (
    AgentTokenSerializer,
    ApiTokenSerializer,
    IssuedApiTokenSerializer,
    NewApiTokenSerializer,
)
from controlplane.api.views.alerts import ERRORS
from controlplane.fleet import tokens
from controlplane.fleet.models import AgentToken, ApiToken


class OwnTokens(SignedIn):
    """Any signed-in user manages their own tokens; what a token may do is its user's role,
    and a read-only token revokes nothing (SignedIn checks its scope)."""

    def has_object_permission(self, request, view, token: ApiToken) -> bool:
        if token.user_id == request.user.pk or request.user.has_perm("fleet.change_apitoken"):
            return True
        self.message = "only its user or an admin may revoke this token"
        return False


@extend_schema(parameters=[OpenApiParameter(
    "all", bool, description="Admins: every user's tokens, not only your own")])
class ApiTokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                      mixins.CreateModelMixin, viewsets.GenericViewSet):
    serializer_class = ApiTokenSerializer
    permission_classes = [OwnTokens]
    lookup_value_converter = "int"
    filterset_fields = ["scope"]

    def get_queryset(self):
        rows = ApiToken.objects.select_related("user").order_by("-created_at", "-id")
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no user
            return rows.none()
        user = self.request.user
        everyone = user.has_perm("fleet.view_apitoken") and (
            self.action != "list" or self.request.query_params.get("all") in ("1", "true"))
        return rows if everyone else rows.filter(user=user)

    @extend_schema(summary="Create an API token for yourself; the token is in this reply only",
                   request=NewApiTokenSerializer,
                   responses={201: IssuedApiTokenSerializer, 400: ERRORS})
    def create(self, request: Request) -> Response:
        if isinstance(request.auth, ApiToken):
            # A leaked token must not be able to outlive its own revocation or expiry.
            raise PermissionDenied("sign in to create a token: a token cannot create another")
        body = NewApiTokenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        plain = tokens.issue_api_token(request.user.get_username(), body.validated_data["name"],
                                       body.validated_data["scope"], body.expires_at())
        row = ApiToken.objects.get(lookup=plain.split("_")[1])
        row.token = plain
        return Response(IssuedApiTokenSerializer(row).data, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Revoke the token now: the next request with it is refused",
                   request=None, responses={200: ApiTokenSerializer})
    @action(detail=True, methods=["post"], filterset_fields=[])
    def revoke(self, request: Request, pk=None) -> Response:
        token = self.get_object()
        tokens.revoke_api_token(token)
        return Response(self.get_serializer(token).data)


class AgentTokenViewSet(viewsets.ReadOnlyModelViewSet):
    """The hosts' agent tokens (admins). Issue one with `manage.py create_agent_token HOST`."""

    serializer_class = AgentTokenSerializer
    permission_classes = [needs("fleet.view_agenttoken", "fleet.change_agenttoken",
                                "CanManageAgentTokens")]
    lookup_value_converter = "int"
    filterset_fields = ["host"]

    def get_queryset(self):
        return AgentToken.objects.select_related("host").order_by("-created_at", "-id")

    @extend_schema(summary="Revoke the agent token now: its next batch is refused",
                   request=None, responses={200: AgentTokenSerializer})
    @action(detail=True, methods=["post"], filterset_fields=[])
    def revoke(self, request: Request, pk=None) -> Response:
        token = self.get_object()
        tokens.revoke_agent_token(token)
        token.refresh_from_db()
        return Response(self.get_serializer(token).data)
