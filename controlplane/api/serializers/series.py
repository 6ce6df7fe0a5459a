"""The series endpoint: its query parameters in, its reply out."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from django.conf import settings
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
    entity = serializers.ListField(
        child=serializers.CharField(), required=False, help_text=(
            "Repeatable, or comma-separated; at most PITWALL_SERIES_MAX_ENTITIES (100) in "
            "all. host.*: host id or hostname; gpu.*: GPU id or "
            "uuid; engine.*: engine id; proc.*: '<host id or hostname>:<pid>'. "
            "entity or host is required, not both"))
    host = serializers.CharField(required=False, help_text=(
        "Host id or hostname: every entity of the metric's kind on it (its present GPUs in "
        "index order, its present engines, its processes seen in the window)"))
    start = InstantField(required=False, help_text=(
        "ISO-8601 or unix seconds; default: end minus one hour"))
    end = InstantField(required=False, help_text="ISO-8601 or unix seconds; default: now")
    max_points = serializers.IntegerField(
        required=False, default=series.DEFAULT_MAX_POINTS, min_value=1,
        max_value=series.MAX_POINTS, help_text=(
            "At most this many points per series; also picks the resolution"))
    quantile = serializers.FloatField(required=False, min_value=0, max_value=1, help_text=(
        "Histogram metrics only: the estimated quantile per point instead of the "
        "observation count"))
    stat = serializers.ChoiceField(choices=series.STATS, required=False, help_text=(
        "Gauges and rates: the statistic of each bucket; default avg (for bitmasks: the or of "
        "all bits seen, for error codes: the highest)"))

    def validate_metric(self, value: str):
        try:
            return series.find_metric(value)
        except series.SeriesError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate_entity(self, value: list[str]) -> list[str]:
        names = [part.strip() for item in value for part in item.split(",") if part.strip()]
        if not names:
            raise serializers.ValidationError("name at least one entity")
        # Each name costs a lookup before the read: without a bound, one URL of 8,000 names
        # held a worker for 7.7 s (8,000 statements, each under the query timeout alone).
        bound = settings.PITWALL["SERIES_MAX_ENTITIES"]
        if len(names) > bound:
            raise serializers.ValidationError(
                f"{len(names)} entities: at most {bound} per request "
                "(PITWALL_SERIES_MAX_ENTITIES); use host= for all of a host's")
        return names

    def validate(self, attrs: dict) -> dict:
        if "entity" in attrs and "host" in attrs:
            raise serializers.ValidationError({"host": "give entity or host, not both"})
        if "entity" not in attrs and "host" not in attrs:
            raise serializers.ValidationError({"entity": "entity or host is required"})
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
    "description": ("[unix seconds, value] pairs in time order; a list value for array "
                    "metrics. A bucketed point is stamped with its bucket's start"),
})
class PointsField(serializers.Field):
    def to_representation(self, value: list) -> list:
        return [[ts, v] for ts, v in value]


class SeriesLineSerializer(serializers.Serializer):
    entity = SeriesEntitySerializer(source="entity.info")
    points = PointsField()


class SeriesSerializer(serializers.Serializer):
    metric = serializers.CharField(source="metric.name")
    unit = serializers.CharField(source="metric.unit")
    kind = serializers.CharField(source="metric.kind", help_text="gauge, rate or histogram")
    quantile = serializers.FloatField(allow_null=True, help_text=(
        "The quantile the histogram points estimate; null for observation counts"))
    stat = serializers.CharField(allow_null=True, help_text=(
        "The statistic of gauge and rate points (avg, min, max, last); null for histograms"))
    resolution = serializers.ChoiceField(choices=["raw", "1m", "1h"], help_text=(
        "The table the range was read from: raw samples, 1-minute or 1-hour rollups (the "
        "part after a rollup's watermark comes from the finer table, in the same buckets)"))
    step = serializers.IntegerField(allow_null=True, help_text=(
        "Bucket width in seconds; null when raw rows are given as they are"))
    start = UnixTimeField(help_text="Unix seconds")
    end = UnixTimeField(help_text="Unix seconds")
    series = SeriesLineSerializer(many=True, help_text=(
        "One per entity, in the order asked (host=: GPUs by index, engines and processes by id)"))
