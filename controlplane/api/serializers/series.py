"""The series endpoint: its query parameters in, its reply out."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.telemetry import series

_UNIX_SECONDS = re.compile(r"-?\d+(\.\d+)?")
# An unescaped "+" in a query string arrives as a space: "…T10:00:00 02:00" meant "+02:00".
_SPACED_OFFSET = re.compile(r"(\d\d:\d\d(:\d\d(\.\d+)?)?) (\d\d:?\d\d)$")
DEFAULT_WINDOW = timedelta(hours=1)


@extend_schema_field(OpenApiTypes.STR)
class InstantField(serializers.Field):
    """ISO-8601 (UTC when it names no zone) or unix seconds (a bare number)."""

    default_error_messages = {
        "invalid": "{value!r} is neither ISO-8601 nor unix seconds",
        "range": "{value!r} is out of range",
    }

    def to_internal_value(self, data) -> datetime:
        text = str(data).strip()
        if _UNIX_SECONDS.fullmatch(text):
            try:
                return datetime.fromtimestamp(float(text), UTC)
            except (OverflowError, OSError, ValueError):
                self.fail("range", value=text)
        try:
            value = datetime.fromisoformat(_SPACED_OFFSET.sub(r"\1+\4", text))
        except ValueError:
            self.fail("invalid", value=text)
        return value if value.tzinfo else value.replace(tzinfo=UTC)


@extend_schema_field(OpenApiTypes.DOUBLE)
class UnixTimeField(serializers.Field):
    def to_representation(self, value: datetime) -> float:
        return value.timestamp()


class SeriesQuerySerializer(serializers.Serializer):
    metric = serializers.CharField(help_text="A catalog metric name, e.g. gpu.util_pct")
    entity = serializers.CharField(help_text=(
        "host.*: host id or hostname; gpu.*: GPU id or uuid; engine.*: engine id; "
        "proc.*: '<host id or hostname>:<pid>'"))
    start = InstantField(required=False, help_text=(
        "ISO-8601 or unix seconds; default: end minus one hour"))
    end = InstantField(required=False, help_text="ISO-8601 or unix seconds; default: now")
    max_points = serializers.IntegerField(
        required=False, default=series.DEFAULT_MAX_POINTS, min_value=1,
        max_value=series.MAX_POINTS, help_text=(
            "At most this many points: beyond it, time is cut into equal buckets"))
    quantile = serializers.FloatField(required=False, min_value=0, max_value=1, help_text=(
        "Histogram metrics only: the estimated quantile per point instead of the "
        "observation count"))

    def validate_metric(self, value: str):
        try:
            return series.find_metric(value)
        except series.SeriesError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate(self, attrs: dict) -> dict:
        # With only a start, the window runs to now; with neither, it is the last hour.
        attrs.setdefault("end", datetime.now(UTC))
        attrs.setdefault("start", attrs["end"] - DEFAULT_WINDOW)
        return attrs


class SeriesEntitySerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="host, gpu, engine or proc")
    id = serializers.IntegerField(required=False, help_text="Not for proc")
    hostname = serializers.CharField()
    host = serializers.IntegerField(required=False, help_text="Host id (gpu, engine, proc)")
    uuid = serializers.CharField(required=False, help_text="gpu only")
    index = serializers.IntegerField(required=False, help_text="gpu only")
    name = serializers.CharField(required=False, help_text="engine only")
    pid = serializers.IntegerField(required=False, help_text="proc only")


@extend_schema_field({
    "type": "array",
    "items": {
        "type": "array", "minItems": 2, "maxItems": 2,
        "items": {"oneOf": [
            {"type": "number"},
            {"type": "array", "items": {"type": "number", "nullable": True}},
        ]},
    },
    "description": "[unix seconds, value] pairs in time order; a list value for array metrics",
})
class PointsField(serializers.Field):
    def to_representation(self, value: list) -> list:
        return [[ts, v] for ts, v in value]


class SeriesSerializer(serializers.Serializer):
    metric = serializers.CharField(source="metric.name")
    unit = serializers.CharField(source="metric.unit")
    kind = serializers.CharField(source="metric.kind", help_text="gauge, rate or histogram")
    quantile = serializers.FloatField(allow_null=True, help_text=(
        "The quantile the histogram points estimate; null for observation counts"))
    entity = SeriesEntitySerializer(source="entity.info")
    resolution = serializers.CharField(help_text=(
        "raw, or raw-<aggregate>-<seconds>s when rows were bucketed (avg for gauges and rates, "
        "sum for histogram counts, or for bitmasks, max for error codes)"))
    start = UnixTimeField(help_text="Unix seconds")
    end = UnixTimeField(help_text="Unix seconds")
    points = PointsField()
