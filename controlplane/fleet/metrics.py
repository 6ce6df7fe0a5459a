"""Services' replica counts and the autoscaler's decisions as metrics, read when scraped: the
numbers a KEDA or Grafana shop reads beside ours (docs/prometheus.md).

Two expositions carry them under the same names: Pitwall's own ``/metrics`` (the
``ServiceScaling`` collector) and the fleet's ``/api/v1/export/prometheus``, which writes the
families of ``scaling_families`` with its own text writer. Both read ``read_scaling``, so the
numbers cannot drift apart."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import Count, Q
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


@dataclass(frozen=True)
class ServiceReplicas:
    """One service's counts: ``replicas`` wanted, ``serving`` in the router's rotation."""

    name: str
    scaling_mode: str
    replicas: int
    serving: int
    min_replicas: int
    max_replicas: int


@dataclass(frozen=True)
class Decisions:
    """How many autoscaling decisions a service recorded in one direction and state."""

    service: str
    direction: str
    state: str
    count: int


@dataclass(frozen=True)
class Scaling:
    services: list[ServiceReplicas]
    decisions: list[Decisions]


def read_scaling(model: str | None = None) -> Scaling:
    """Every service's replica counts and limits, and its decisions counted by direction and
    state: two statements. ``model``: only the services serving it (``Service.model``)."""
    from controlplane.fleet.models import ScaleDecision, Service

    services = Service.objects.all()
    decisions = ScaleDecision.objects.all()
    if model is not None:
        services = services.filter(model=model)
        decisions = decisions.filter(service__model=model)
    rows = services.annotate(routed=Count(
        "replica_set", filter=Q(replica_set__in_rotation=True))).order_by("name").values_list(
        "name", "scaling_mode", "replicas", "routed", "min_replicas", "max_replicas")
    # Ordered by the grouped columns alone: the model's ordering (-at) would split the groups.
    counted = decisions.values_list("service__name", "direction", "state").annotate(
        n=Count("id")).order_by("service__name", "direction", "state")
    return Scaling([ServiceReplicas(*row) for row in rows], [Decisions(*row) for row in counted])


def scaling_families(scaling: Scaling) -> list[GaugeMetricFamily | CounterMetricFamily]:
    """The four families, with their names, HELP and labels: written once for both
    expositions."""
    desired = GaugeMetricFamily("pitwall_service_replicas_desired",
                                "Replicas the service wants (the autoscaler's count in "
                                "auto mode)", labels=["service", "scaling_mode"])
    serving = GaugeMetricFamily("pitwall_service_replicas_serving",
                                "Replicas in the router's rotation", labels=["service"])
    limits = GaugeMetricFamily("pitwall_service_replicas_limit",
                               "The autoscaler's bounds", labels=["service", "bound"])
    for s in scaling.services:
        desired.add_metric([s.name, s.scaling_mode], s.replicas)
        serving.add_metric([s.name], s.serving)
        limits.add_metric([s.name, "min"], s.min_replicas)
        limits.add_metric([s.name, "max"], s.max_replicas)
    decisions = CounterMetricFamily("pitwall_service_scale_decisions",
                                    "Autoscaling decisions recorded",
                                    labels=["service", "direction", "state"])
    for d in scaling.decisions:
        decisions.add_metric([d.service, d.direction, d.state], d.count)
    return [desired, serving, limits, decisions]


class ServiceScaling(Collector):
    """Per service: the replicas wanted, in the router's rotation, and the autoscaling
    limits; the decisions recorded by direction and state."""

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield from scaling_families(read_scaling())
