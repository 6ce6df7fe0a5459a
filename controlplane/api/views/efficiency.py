"""Efficiency and objectives per engine and per model (docs/efficiency.md)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api.permissions import CanReadFleet
from controlplane.api.serializers.efficiency import (
    EfficiencyQuerySerializer,
    EngineReportSerializer,
    EnginesReportSerializer,
    ModelsReportSerializer,
)
from controlplane.api.views.series import QueryTookTooLong
from controlplane.fleet.models import Engine
from controlplane.telemetry import efficiency
from controlplane.telemetry.series import QueryTimeout, SeriesError

_ABOUT = (
    "Over the range ending at end, read from the coarsest rollup tier that serves it (edges "
    "from finer tiers): generation tokens and tokens/s, tokens per joule (energy from the "
    "GPUs' gpu.energy_j counter when all of an engine's GPUs report it, else gpu.power_w "
    "integrated; energy_source says which), GPU-hours, cost from PITWALL_GPU_HOUR_PRICE (null "
    "when unset), and the share of TTFT and ITL observations under their objectives with the "
    "error-budget burn over the last hour and the last 30 days.")
_ERRORS = {
    400: OpenApiResponse(OpenApiTypes.OBJECT, description=(
        "An object keyed by the parameter at fault, each with a list of messages")),
    503: OpenApiResponse(OpenApiTypes.OBJECT,
                         description="{detail}: the read ran past the query timeout"),
}


def _report(request: Request, engine_ids: list[int] | None = None) -> efficiency.Report:
    query = EfficiencyQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    params = dict(query.validated_data)
    model = params.get("model") if engine_ids is None else None
    try:
        return efficiency.report(params["range"], params.get("end"), engine_ids, model)
    except SeriesError as exc:
        raise ValidationError({exc.param: [str(exc)]}) from None
    except QueryTimeout as exc:
        raise QueryTookTooLong(str(exc)) from None


class EngineEfficiencyListView(APIView):
    permission_classes = [CanReadFleet]

    @extend_schema(summary="Efficiency and objectives per engine", description=_ABOUT,
                   parameters=[EfficiencyQuerySerializer],
                   responses={200: EnginesReportSerializer, **_ERRORS})
    def get(self, request: Request) -> Response:
        return Response(EnginesReportSerializer(_report(request)).data)


class EngineEfficiencyView(APIView):
    permission_classes = [CanReadFleet]

    @extend_schema(summary="Efficiency and objectives of one engine", description=_ABOUT,
                   operation_id="efficiency_engine_retrieve",
                   parameters=[EfficiencyQuerySerializer],
                   responses={200: EngineReportSerializer, **_ERRORS,
                              404: OpenApiResponse(OpenApiTypes.OBJECT,
                                                   description="No such engine")})
    def get(self, request: Request, engine_id: int) -> Response:
        if not Engine.objects.filter(pk=engine_id).exists():
            raise NotFound({"engine": [f"no engine with id {engine_id}"]})
        report = _report(request, engine_ids=[engine_id])
        return Response(EngineReportSerializer(report).data)


class ModelEfficiencyListView(APIView):
    permission_classes = [CanReadFleet]

    @extend_schema(summary="Efficiency and objectives per model (its engines summed)",
                   description=_ABOUT, parameters=[EfficiencyQuerySerializer],
                   responses={200: ModelsReportSerializer, **_ERRORS})
    def get(self, request: Request) -> Response:
        return Response(ModelsReportSerializer(_report(request)).data)
