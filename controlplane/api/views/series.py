from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api.permissions import CanReadFleet
from controlplane.api.serializers.series import SeriesQuerySerializer, SeriesSerializer
from controlplane.telemetry import series

_ERRORS = "An object keyed by the parameter at fault, each with a list of messages"


class SeriesView(APIView):
    permission_classes = [CanReadFleet]

    @extend_schema(
        summary="One metric of one entity over time",
        description=(
            "Raw samples when the window holds at most max_points of them; otherwise time is "
            "cut into equal buckets (gauges and rates averaged, histogram counts summed) and "
            "the reply's resolution says so. Absent values are left out of points. The window "
            "is start <= ts < end, at most 31 days."),
        parameters=[SeriesQuerySerializer],
        responses={
            200: SeriesSerializer,
            400: OpenApiResponse(OpenApiTypes.OBJECT, description=_ERRORS),
            404: OpenApiResponse(OpenApiTypes.OBJECT, description="No such entity: {entity}"),
        },
    )
    def get(self, request: Request) -> Response:
        query = SeriesQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = dict(query.validated_data)
        try:
            entity = series.resolve_entity(params["metric"], params.pop("entity"))
            result = series.read_series(entity=entity, **params)
        except series.EntityNotFound as exc:
            raise NotFound({exc.param: [str(exc)]}) from None
        except series.SeriesError as exc:
            raise ValidationError({exc.param: [str(exc)]}) from None
        return Response(SeriesSerializer(result).data)
