"""Telemetry's state as metrics, read when scraped (``/metrics``, docs/prometheus.md)."""

from __future__ import annotations

from collections.abc import Iterator

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class RollupLag(Collector):
    """How far behind now each rollup tier is built (its watermark). A 1-minute tier that
    keeps up lags by its settle time plus up to one interval and one minute; the hourly
    tier by up to an hour more. A lag that keeps growing: the rollup task is not running."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from controlplane.telemetry.models import RollupWatermark

        lag = GaugeMetricFamily("pitwall_rollup_lag_seconds", "Seconds between now and the "
                                "end of what a rollup tier holds", labels=["resolution"])
        now = timezone.now()
        for resolution, upto in RollupWatermark.objects.values_list("resolution", "upto"):
            lag.add_metric([resolution], (now - upto).total_seconds())
        yield lag
