"""Alert rules (with a preview), alerts (with acks) and silences."""

from __future__ import annotations

from django.db.models import Case, IntegerField, Value, When
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.alerts import silences
from controlplane.alerts.models import Alert, AlertRule, AlertState, Silence
from controlplane.alerts.preview import QueryTimeout, preview
from controlplane.api.filters import AlertFilter, SilenceFilter
from controlplane.api.permissions import CanAck, CanEditRules, CanManageRules, CanSilence
from controlplane.api.serializers.alerts import (
    AckSerializer,
    AlertDetailSerializer,
    AlertRuleSerializer,
    AlertSerializer,
    RulePreviewRequestSerializer,
    RulePreviewSerializer,
    SilenceSerializer,
)
from controlplane.api.views.series import QueryTookTooLong

ERRORS = OpenApiResponse(OpenApiTypes.OBJECT,
                         description="An object keyed by the field at fault, each with messages")


def write_responses(serializer) -> dict:
    """The schema of a model viewset's writes: the object, or a 400 keyed by field."""
    return {"create": extend_schema(responses={201: serializer, 400: ERRORS}),
            "update": extend_schema(responses={200: serializer, 400: ERRORS}),
            "partial_update": extend_schema(responses={200: serializer, 400: ERRORS})}


CONFLICT = OpenApiResponse(OpenApiTypes.OBJECT, description="{detail}: the alert is not firing")

# Firing first, then pending: what needs eyes now heads the list.
STATE_RANK = Case(
    *(When(state=state, then=Value(rank)) for rank, state in enumerate(
        [AlertState.FIRING, AlertState.PENDING, AlertState.RESOLVED, AlertState.INACTIVE])),
    output_field=IntegerField())


@extend_schema_view(**write_responses(AlertRuleSerializer))
class AlertRuleViewSet(viewsets.ModelViewSet):
    """Alert rules: every role reads them; admins create, change and delete them."""

    queryset = AlertRule.objects.order_by("name")  # unique: a stable page order
    serializer_class = AlertRuleSerializer
    permission_classes = [CanManageRules]
    lookup_value_converter = "int"

    @extend_schema(
        summary="What a draft rule would fire on now; nothing is stored",
        description=(
            "The body is a rule as for create (name optional). It is validated the same way, "
            "then the evaluator's own queries and scope run once. With for_s > 0 the targets "
            "listed meet the condition now and would fire only if it keeps holding."),
        request=RulePreviewRequestSerializer,
        responses={200: RulePreviewSerializer, 400: ERRORS, 503: OpenApiResponse(
            OpenApiTypes.OBJECT, description="{detail}: the preview ran past the query timeout")},
    )
    # It runs the draft's queries: for those who may write rules.
    @action(detail=False, methods=["post"], permission_classes=[CanEditRules])
    def preview(self, request: Request) -> Response:
        draft = RulePreviewRequestSerializer(data=request.data)
        draft.is_valid(raise_exception=True)
        rule = AlertRule(**draft.validated_data)
        try:
            found = preview(rule)
        except QueryTimeout as exc:
            raise QueryTookTooLong(str(exc)) from None
        return Response(RulePreviewSerializer(found).data)


class ActiveSilencesMixin:
    def get_serializer_context(self):
        context = super().get_serializer_context()
        # One read of the active silences per request: each alert's silenced_by is matched here.
        context["silences"] = list(silences.active_silences())
        return context


@extend_schema_view(retrieve=extend_schema(responses=AlertDetailSerializer))
class AlertViewSet(ActiveSilencesMixin, viewsets.ReadOnlyModelViewSet):
    """The state of each rule on each target; the list puts firing alerts first."""

    permission_classes = [CanAck]
    filterset_class = AlertFilter
    lookup_value_converter = "int"

    def get_queryset(self):
        return Alert.objects.select_related("rule").order_by(STATE_RANK, "-id")

    def get_serializer_class(self):
        return AlertSerializer if self.action == "list" else AlertDetailSerializer

    @extend_schema(
        summary="Acknowledge a firing alert: no repeats until it resolves",
        request=AckSerializer,
        responses={200: AlertDetailSerializer, 400: ERRORS, 409: CONFLICT},
    )
    @action(detail=True, methods=["post"])
    def ack(self, request: Request, pk: int) -> Response:
        alert = self.get_object()
        body = AckSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if not silences.acknowledge(alert, by=request.user.get_username(),
                                    comment=body.validated_data["comment"]):
            alert.refresh_from_db(fields=["state"])
            return Response(
                {"detail": f"alert {alert.id} is {alert.state}: only a firing alert can be "
                           "acknowledged"}, status=status.HTTP_409_CONFLICT)
        return Response(self.get_serializer(alert).data)

    @extend_schema(summary="Take an acknowledgement back: repeats resume", request=None,
                   responses={200: AlertDetailSerializer})
    @action(detail=True, methods=["post"])
    def unack(self, request: Request, pk: int) -> Response:
        alert = self.get_object()
        silences.unacknowledge(alert)
        return Response(self.get_serializer(alert).data)


class SilenceViewSet(mixins.CreateModelMixin, mixins.ListModelMixin,
                     mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Silences, Alertmanager-style: to change one, expire it and create a new one."""

    queryset = Silence.objects.select_related("created_by").order_by("-starts_at", "-id")
    serializer_class = SilenceSerializer
    permission_classes = [CanSilence]
    filterset_class = SilenceFilter
    lookup_value_converter = "int"

    @extend_schema(summary="End a silence now", request=None,
                   responses={200: SilenceSerializer})
    @action(detail=True, methods=["post"])
    def expire(self, request: Request, pk: int) -> Response:
        silence = self.get_object()
        silences.expire_silence(silence)
        return Response(self.get_serializer(silence).data)
