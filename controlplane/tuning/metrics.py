"""The tuning pass's own metric (``/metrics``, docs/prometheus.md)."""

from __future__ import annotations

from prometheus_client import Histogram

PASS_SECONDS = Histogram(
    "pitwall_tuning_pass_seconds", "One tuning pass (every deployment diagnosed)",
    buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0))
