"""The efficiency endpoints: their query parameters in, their reply out."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api.serializers.series import InstantField, UnixTimeField
from controlplane.telemetry import efficiency


class EfficiencyQuerySerializer(serializers.Serializer):
    range = serializers.ChoiceField(
        choices=list(efficiency.RANGES), default=efficiency.DEFAULT_RANGE,
        help_text="How far back from end: 1h (default), 24h, 7d or 30d")
    end = InstantField(required=False, help_text=(
        "ISO-8601 or unix seconds; default: now, and for 24h, 7d and 30d the end of the last "
        "hour the rollups hold while they keep up (the figures are then rollup sums alone)"))
    model = serializers.CharField(required=False, max_length=300, help_text=(
        "Only the engines serving this model (Engine.model, exactly)"))


class StretchSerializer(serializers.Serializer):
    # A string, not a choice: the series API's resolution enum (raw, 1m, 1h) has the name.
    resolution = serializers.CharField(help_text="raw, 1m, 1h or 1d")
    start = UnixTimeField(source="lo", help_text="Unix seconds")
    end = UnixTimeField(source="hi", help_text="Unix seconds")


class AttainmentSerializer(serializers.Serializer):
    objective_ms = serializers.FloatField(help_text="The objective: under it is good")
    attainment = serializers.FloatField(allow_null=True, help_text=(
        "Share of the range's observations under the objective, 0-1, estimated from the "
        "summed histogram buckets; null without observations"))
    requests = serializers.IntegerField(help_text="Observations in the range")
    burn_1h = serializers.FloatField(allow_null=True, help_text=(
        "(1 - attainment) / (1 - target) over the last hour of the range; 1 spends the error "
        "budget exactly; null without observations"))
    burn_30d = serializers.FloatField(allow_null=True, help_text=(
        "The same over the last 30 days of the range"))


class FiguresSerializer(serializers.Serializer):
    generation_tokens = serializers.FloatField(source="figures.generation_tokens", help_text=(
        "Tokens generated in the range (the rate summed over the samples)"))
    generation_tokens_per_s = serializers.FloatField(
        source="figures.generation_tokens_per_s", allow_null=True, help_text=(
            "Average over the samples; for a model, its engines' averages added up"))
    seconds_with_samples = serializers.FloatField(source="figures.seconds_with_samples")
    energy_j = serializers.FloatField(source="figures.energy_j", allow_null=True, help_text=(
        "Energy the GPUs used, joules; null when no GPU of it reported energy or power"))
    energy_source = serializers.ChoiceField(
        source="figures.energy_source", allow_null=True,
        choices=["energy_counter", "power", "mixed"], help_text=(
            "energy_counter: the rise of gpu.energy_j; power: gpu.power_w integrated over the "
            "samples; mixed (models only): engines of both"))
    tokens_per_joule = serializers.FloatField(source="figures.tokens_per_joule",
                                              allow_null=True)
    gpus = serializers.IntegerField(source="figures.gpus")
    gpu_hours = serializers.FloatField(source="figures.gpu_hours", help_text=(
        "GPUs x hours with samples"))
    cost = serializers.FloatField(source="figures.cost", allow_null=True, help_text=(
        "gpu_hours x the GPU-hour price; null when no price is configured"))
    cost_per_million_tokens = serializers.FloatField(
        source="figures.cost_per_million_tokens", allow_null=True)
    ttft = AttainmentSerializer(source="figures.ttft")
    itl = AttainmentSerializer(source="figures.itl")


class EngineEfficiencySerializer(FiguresSerializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    host = serializers.IntegerField(source="host_id")
    hostname = serializers.CharField()
    model = serializers.CharField()
    gpu_ids = serializers.ListField(child=serializers.IntegerField())


class ModelEfficiencySerializer(FiguresSerializer):
    model = serializers.CharField(help_text="Engine.model; empty when engines named none")
    engine_ids = serializers.ListField(child=serializers.IntegerField())


class ReportSerializer(serializers.Serializer):
    range = serializers.CharField()
    start = UnixTimeField(help_text="Unix seconds")
    end = UnixTimeField(help_text="Unix seconds")
    resolution = serializers.CharField(help_text=(
        "The tier read for the range's whole buckets, raw, 1m, 1h or 1d; its edges come from "
        "finer tiers"))
    stretches = StretchSerializer(many=True, help_text="The tables read, in time order")
    target = serializers.FloatField(help_text="OBJECTIVE_TARGET: the share that must meet")
    objective_ms = serializers.DictField(child=serializers.FloatField(), help_text=(
        "ttft and itl objectives in milliseconds"))
    gpu_hour_price = serializers.FloatField(allow_null=True, help_text=(
        "PITWALL_GPU_HOUR_PRICE; null when not configured (costs are null then)"))
    currency = serializers.CharField()
    energy_counter_known = serializers.BooleanField(help_text=(
        "Whether the metric catalog has gpu.energy_j (else energy always comes from power)"))


class EnginesReportSerializer(ReportSerializer):
    engines = EngineEfficiencySerializer(many=True)


class EngineReportSerializer(ReportSerializer):
    engine = serializers.SerializerMethodField()

    @extend_schema_field(EngineEfficiencySerializer)
    def get_engine(self, report) -> dict:
        return EngineEfficiencySerializer(report.engines[0]).data


class ModelsReportSerializer(ReportSerializer):
    models = ModelEfficiencySerializer(many=True)
