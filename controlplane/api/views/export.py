"""``GET /api/v1/export/prometheus``: the fleet as a Prometheus target (docs/prometheus.md).

The newest value of every catalog metric of every online host, GPU and engine, and each
engine's latency histograms over a recent minute, in the text exposition format 0.0.4; and
the services' replica counts and autoscaling decisions, under the names ``/metrics`` gives
them. The fleet's reads are ``controlplane.telemetry.export``'s, the services'
``controlplane.fleet.metrics``'; this module checks the parameters, decides which scrapes carry
the services (not host-bound: ``services_selected``) and writes the text.

The text is written here rather than through ``prometheus_client``'s collectors and
``generate_latest``: at 8,000 GPUs (120,000 GPU samples) ``generate_latest`` took 1.0 CPU-s,
escaping and formatting every label of every sample, where writing each entity's label set
once and joining lines took 0.03 s (BENCHMARKS.md); ``promtool check metrics`` checks the
result in the tests.
"""

from __future__ import annotations

import functools
import re
import zlib
from itertools import accumulate

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from prometheus_client.metrics_core import Metric as Family
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.views import APIView

from agents.protocol import Metric
from controlplane.alerts.patterns import glob_match, glob_problem
from controlplane.api.permissions import CanReadFleet
from controlplane.fleet.metrics import read_scaling, scaling_families
from controlplane.lib.selfmetrics import CONTENT_TYPE
from controlplane.telemetry import export

PREFIX = "pitwall_"
WINDOW_MIN_S, WINDOW_MAX_S = 5, 300
_SHARD = re.compile(r"^(\d{1,4})/(\d{1,4})$")
_ERRORS = "An object keyed by the parameter at fault, each with a list of messages"


class ExportQuerySerializer(serializers.Serializer):
    hostname = serializers.CharField(
        required=False, trim_whitespace=False,
        help_text="Hosts whose hostname matches this glob (*, ?, [seq]), as alert rules' "
                  "hostname_glob")
    model = serializers.CharField(
        required=False, max_length=300, trim_whitespace=False,
        help_text="Engines serving this model, their hosts and the GPUs they use")
    deployment = serializers.CharField(
        required=False, max_length=100, trim_whitespace=False,
        help_text="Engines of this deployment (by name), their hosts and the GPUs they use")
    shard = serializers.CharField(
        required=False, max_length=9,
        help_text=f"i/n: the hosts whose CRC-32 of the hostname modulo n is i "
                  f"(0 <= i < n <= {export.MAX_SHARDS})")
    histograms = serializers.ChoiceField(
        choices=["minute", "window", "none"], required=False,
        help_text="Where the engine latency histograms come from: minute (the default), each "
                  "engine's newest minute of the 1-minute rollups, 1.5-2.5 min old and cheap; "
                  "window, its raw observations of the last histogram_window_s seconds, fresh "
                  "and about twice the scrape's cost; none, no histograms")
    histogram_window_s = serializers.IntegerField(
        required=False, min_value=WINDOW_MIN_S, max_value=WINDOW_MAX_S,
        help_text=f"With histograms=window (implied when given alone): the seconds of "
                  f"observations each histogram sums, {WINDOW_MIN_S}-{WINDOW_MAX_S} (default: "
                  f"PITWALL_EXPORT_HISTOGRAM_WINDOW_S)")

    def validate(self, attrs: dict) -> dict:
        kind = attrs.get("histograms")
        if kind is None:
            kind = "window" if "histogram_window_s" in attrs else "minute"
        elif "histogram_window_s" in attrs and kind != "window":
            raise serializers.ValidationError(
                {"histogram_window_s": [f"applies to histograms=window, not {kind}"]})
        window = attrs.get("histogram_window_s", settings.PITWALL["EXPORT_HISTOGRAM_WINDOW_S"])
        attrs["source"] = export.HistogramSource(kind, window if kind == "window" else 0)
        return attrs

    def validate_hostname(self, value: str) -> str:
        problem = glob_problem(value)
        if problem:
            raise serializers.ValidationError(f"the glob {problem}")
        return value

    def validate_shard(self, value: str) -> tuple[int, int]:
        match = _SHARD.match(value)
        if match is None:
            raise serializers.ValidationError("write it i/n, such as 0/4")
        index, shards = int(match[1]), int(match[2])
        if not 0 < shards <= export.MAX_SHARDS or not 0 <= index < shards:
            raise serializers.ValidationError(
                f"needs 0 <= i < n <= {export.MAX_SHARDS}, got {index}/{shards}")
        return index, shards


class PrometheusExportView(APIView):
    permission_classes = [CanReadFleet]

    @extend_schema(
        summary="The fleet as a Prometheus target (text format 0.0.4)",
        description=(
            "The newest value of every gauge and rate of every online host, GPU and engine "
            "(reported within the online window), named pitwall_<catalog name with dots as "
            "underscores>, labelled hostname; GPUs add gpu_uuid and gpu_index, engines engine, "
            "model and deployment. Rates are per-second values already. Engine latency "
            "histograms hold the observations of one minute (the newest the 1-minute rollups "
            "hold), or with histograms=window those of the last histogram_window_s seconds: "
            "windowed, not counters (use histogram_quantile without rate()). Filters "
            "narrow a scrape for sharding: hostname glob, model, deployment, shard=i/n. "
            "The services' replica counts and autoscaling decisions (pitwall_service_*, as "
            "in /metrics) are in a scrape without filters, in shard 0 only, and with model= "
            "for that model's services; a hostname or deployment filter leaves them out."),
        parameters=[ExportQuerySerializer],
        responses={
            (200, "text/plain; version=0.0.4"): OpenApiResponse(
                OpenApiTypes.STR, description="The exposition, gzip-encoded when accepted"),
            400: OpenApiResponse(OpenApiTypes.OBJECT, description=_ERRORS),
        },
    )
    def get(self, request: Request) -> HttpResponse:
        query = ExportQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        glob = params.get("hostname")
        selection = export.Selection(
            hostname=(lambda name: glob_match(glob, name)) if glob is not None else None,
            model=params.get("model"), deployment=params.get("deployment"),
            shard=params.get("shard"))
        body = exposition(export.snapshot(selection, params["source"]))
        if services_selected(params):
            body += families_text(scaling_families(read_scaling(params.get("model"))))
        response = HttpResponse(content_type=CONTENT_TYPE)
        response["Vary"] = "Accept-Encoding"
        if "gzip" in request.META.get("HTTP_ACCEPT_ENCODING", ""):
            # Level 1: on 14 MB of GPU lines, 0.02 CPU-s for 449 kB where level 6 took
            # 0.06 s for 417 kB.
            packer = zlib.compressobj(1, zlib.DEFLATED, 31)
            body = packer.compress(body) + packer.flush()
            response["Content-Encoding"] = "gzip"
        response.content = body
        return response


def services_selected(params: dict) -> bool:
    """Whether a scrape carries the services' families. A service is not on one host (its
    replicas spread over several, its router on another), so it belongs to no hostname glob
    and no host's shard: it is written once, in a scrape of the whole fleet or in shard 0 of
    a sharded one, so that a sum over the shards counts it once. A deployment filter selects
    one deployment's engines, not a service (a replica is one deployment of many); a model
    filter keeps the services of that model (``read_scaling``)."""
    if "hostname" in params or "deployment" in params:
        return False
    shard = params.get("shard")
    return shard is None or shard[0] == 0


# -- the text format ---------------------------------------------------------------------------

def metric_name(metric: Metric) -> str:
    return PREFIX + metric.name.replace(".", "_")


def help_text(metric: Metric, source: export.HistogramSource) -> str:
    if metric.kind == "histogram":
        note = f"{metric.unit}; {source.over}, not a counter: no rate()"
    elif metric.kind == "rate":
        note = f"{metric.unit}; a per-second rate already: no rate()"
    else:
        note = metric.unit
    return escape_help(f"{metric.description} ({note})" if note else metric.description)


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def label_value(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def label_set(labels: dict[str, str]) -> str:
    """The inside of the braces: ``hostname="h",gpu_index="0"``."""
    return ",".join(f'{name}="{label_value(value)}"' for name, value in labels.items())


def _header(name: str, metric: Metric, kind: str, source: export.HistogramSource) -> str:
    return f"# HELP {name} {help_text(metric, source)}\n# TYPE {name} {kind}\n"


def exposition(snap: export.Snapshot) -> bytes:
    """The snapshot as text format 0.0.4. Families without a value are left out; so is every
    value absent from an entity's newest row (never written as 0).

    Lines are joined a column at a time, with each entity's label set written once: about
    0.3 µs a line. Each family is encoded apart: the HELP of one (°C) is not ASCII, and one
    string of the whole would be stored and encoded at two bytes a character."""
    out: list[bytes] = []
    sets: dict[int, str] = {}  # id(labels) -> the label set, for the histograms' engines
    for values in snap.values:
        braced = []
        for labels in values.labels:
            sets[id(labels)] = text = label_set(labels)
            braced.append("{" + text + "} ")
        columns = list(zip(*values.rows, strict=True)) if values.rows else []
        for metric, column in zip(values.metrics, columns, strict=False):
            name = metric_name(metric)
            block = "".join([f"{name}{labels}{value}\n"
                             for labels, value in zip(braced, column, strict=True)
                             if value is not None])
            if block:
                out.append(_header(name, metric, "gauge", snap.source).encode())
                out.append(block.encode())
    for metric, histograms in snap.histograms.items():
        if histograms:
            name = metric_name(metric)
            out.append(_header(name, metric, "histogram", snap.source).encode())
            out.append("".join([_histogram_lines(name, h, sets.get(id(h.labels)))
                                for h in histograms]).encode())
    return b"".join(out)


def families_text(families: list[Family]) -> bytes:
    """Gauge and counter families as ``prometheus_client``'s ``generate_latest`` writes them,
    so the text matches ``/metrics``' byte for byte: a counter's HELP and TYPE name its
    ``_total`` samples, labels are sorted by name. A family without a sample is left out, as
    the fleet's are."""
    out: list[str] = []
    for family in families:
        if not family.samples:
            continue
        name = f"{family.name}_total" if family.type == "counter" else family.name
        out.append(f"# HELP {name} {escape_help(family.documentation)}\n"
                   f"# TYPE {name} {family.type}\n")
        out.extend(_sample_line(sample) for sample in family.samples)
    return "".join(out).encode()


def _sample_line(sample: Sample) -> str:
    value = floatToGoString(sample.value)
    if not sample.labels:
        return f"{sample.name} {value}\n"
    return f"{sample.name}{{{label_set(dict(sorted(sample.labels.items())))}}} {value}\n"


def _histogram_lines(name: str, histogram: export.Histogram, labels: str | None) -> str:
    if labels is None:
        labels = label_set(histogram.labels)
    head = f"{name}_bucket{{{labels},le=\""
    cumulative = list(accumulate(histogram.counts))
    lines = [f"{head}{le}\"}} {total}\n"
             for le, total in zip(_les(histogram.bounds), cumulative, strict=True)]
    lines.append(f"{name}_sum{{{labels}}} {floatToGoString(histogram.sum)}\n")
    lines.append(f"{name}_count{{{labels}}} {cumulative[-1]}\n")
    return "".join(lines)


@functools.lru_cache(maxsize=256)
def _les(bounds: tuple[float, ...]) -> tuple[str, ...]:
    """The ``le`` values of a layout, +Inf last, as Prometheus' Python client writes them
    ("0.1", "1.0", "+Inf"): what vLLM's own /metrics says, so a series keeps its name."""
    return (*(floatToGoString(b) for b in bounds), "+Inf")
