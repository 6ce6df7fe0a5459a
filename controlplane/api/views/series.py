from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api.permissions import CanReadFleet
from controlplane.api.serializers.series import SeriesQuerySerializer, SeriesSerializer
from controlplane.telemetry import series

_ERRORS = "An object keyed by the parameter at fault, each with a list of messages"


class QueryTookTooLong(APIException):
    """A statement ran past PITWALL["QUERY_TIMEOUT_S"] and PostgreSQL cancelled it."""

    status_code = 503
    default_code = "query_timeout"
    default_detail = "the query took too long and was stopped"


class SeriesView(APIView):
    permission_classes = [CanReadFleet]

    @extend_schema(
        summary="One metric of one or more entities over time",
        description=(
            "The resolution is the coarsest of raw samples, 1-minute and 1-hour rollups that "
            "still gives max_points buckets over the range (a tier that does not reach back "
            "to start is skipped for a coarser one); points are buckets of step seconds, or "
            "the raw rows themselves when they fit in max_points. Gauges and rates show the "
            "stat of each bucket; histograms the observation count, or with quantile the "
            "estimate from the summed bucket counts. Absent values are left out of points. "
            "The window is start <= ts < end, at most two years."),
        parameters=[SeriesQuerySerializer],
        responses={
            200: SeriesSerializer,
            400: OpenApiResponse(OpenApiTypes.OBJECT, description=_ERRORS),
            404: OpenApiResponse(OpenApiTypes.OBJECT,
                                 description="No such entity or host: {entity} or {host}"),
            503: OpenApiResponse(OpenApiTypes.OBJECT,
                                 description="{detail}: the read ran past the query timeout"),
        },
    )
    def get(self, request: Request) -> Response:
        query = SeriesQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = dict(query.validated_data)
        try:
            result = series.read_series(**params)
        except series.EntityNotFound as exc:
            raise NotFound({exc.param: [str(exc)]}) from None
        except series.SeriesError as exc:
            raise ValidationError({exc.param: [str(exc)]}) from None
        except series.QueryTimeout as exc:
            raise QueryTookTooLong(str(exc)) from None
        return Response(SeriesSerializer(result).data)
