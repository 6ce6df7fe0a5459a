"""Services' replica counts and the autoscaler's decisions as metrics, read when scraped
(``/metrics``, docs/prometheus.md): the numbers a KEDA or Grafana shop reads beside ours."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, Q
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class ServiceScaling(Collector):
    """Per service: the replicas wanted, in the router's rotation, and the autoscaling
    limits; the decisions recorded by direction and state."""

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        from controlplane.fleet.models import ScaleDecision, Service

        desired = GaugeMetricFamily("pitwall_service_replicas_desired",
                                    "Replicas the service wants (the autoscaler's count in "
                                    "auto mode)", labels=["service", "scaling_mode"])
        serving = GaugeMetricFamily("pitwall_service_replicas_serving",
                                    "Replicas in the router's rotation", labels=["service"])
        limits = GaugeMetricFamily("pitwall_service_replicas_limit",
                                   "The autoscaler's bounds", labels=["service", "bound"])
        rows = Service.objects.annotate(routed=Count(
            "replica_set", filter=Q(replica_set__in_rotation=True))).values_list(
            "name", "scaling_mode", "replicas", "routed", "min_replicas", "max_replicas")
        for name, mode, replicas, routed, low, high in rows:
            desired.add_metric([name, mode], replicas)
            serving.add_metric([name], routed)
            limits.add_metric([name, "min"], low)
            limits.add_metric([name, "max"], high)
        decisions = CounterMetricFamily("pitwall_service_scale_decisions",
                                        "Autoscaling decisions recorded",
                                        labels=["service", "direction", "state"])
        for name, direction, state, n in (ScaleDecision.objects.values_list(
                "service__name", "direction", "state").annotate(n=Count("id"))
                .order_by()):
            decisions.add_metric([name, direction, state], n)
        yield from (desired, serving, limits, decisions)
