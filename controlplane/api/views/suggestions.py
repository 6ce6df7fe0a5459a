"""Suggestions: read by every role; accepted, dismissed and reverted by deployers."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.filters import SuggestionFilter
from controlplane.api.permissions import CanDecideSuggestions
from controlplane.api.serializers.suggestions import SuggestionSerializer
from controlplane.tuning import service
from controlplane.tuning.models import Suggestion

REFUSED = OpenApiResponse(description='{"detail": why the action does not apply now}')


class SuggestionViewSet(viewsets.ReadOnlyModelViewSet):
    """What Pitwall proposes to change on a vLLM server, with the evidence, and the outcome:
    open, cleared, dismissed, accepted, applied, then improved / unchanged / regressed, or
    reverted. A server Pitwall does not run (``deployment`` null, ``engine`` set) gets
    reports: the ``command`` to paste; dismissed, never accepted (409)."""

    serializer_class = SuggestionSerializer
    permission_classes = [CanDecideSuggestions]
    lookup_value_converter = "int"
    filterset_class = SuggestionFilter

    def get_queryset(self):
        return (Suggestion.objects.select_related("deployment", "engine", "decided_by")
                .order_by("-created_at", "-id"))

    def _act(self, request: Request, do) -> Response:
        try:
            done = do(self.get_object(), request.user)
        except service.Refused as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(self.get_serializer(done).data)

    @extend_schema(summary="Apply the proposed change: a new revision of the deployment "
                           "(409 for an engine Pitwall does not run)",
                   request=None, responses={200: SuggestionSerializer, 409: REFUSED})
    @action(detail=True, methods=["post"], filterset_class=None)
    def accept(self, request: Request, pk=None) -> Response:
        return self._act(request, service.accept)

    @extend_schema(summary="Not now: the same evidence will not bring it back",
                   request=None, responses={200: SuggestionSerializer, 409: REFUSED})
    @action(detail=True, methods=["post"], filterset_class=None)
    def dismiss(self, request: Request, pk=None) -> Response:
        return self._act(request, service.dismiss)

    @extend_schema(summary="Back to the config before the accepted change",
                   request=None, responses={200: SuggestionSerializer, 409: REFUSED})
    @action(detail=True, methods=["post"], filterset_class=None)
    def revert(self, request: Request, pk=None) -> Response:
        return self._act(request, service.revert)
