"""Services: a model on many replicas behind vLLM's router. The list, the form (create and
change), the page (replicas with where and why placement put them, whether the router sends
them requests, their start and traffic; rollouts, events, revisions) and the deletion. Every
change goes through ``fleet.services``, as the API's do."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Prefetch, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlplane.fleet import deployments, replica_facts, services
from controlplane.fleet.models import (
    Deployment,
    DeploymentState,
    Rollout,
    RolloutState,
    Service,
    ServiceEventKind,
)
from controlplane.web.forms import ServiceForm
from controlplane.web.views.access import needs
from controlplane.web.views.deployments import _why, edit_config

ADD, CHANGE, DELETE = "fleet.add_service", "fleet.change_service", "fleet.delete_service"
services_access = needs("fleet.view_service", CHANGE)
create_access = needs(ADD, ADD)
change_access = needs(CHANGE, CHANGE)
delete_access = needs(DELETE, DELETE)

ROLLOUTS_SHOWN = 10
EVENTS_SHOWN = 50
REVISIONS_SHOWN = 20
# How the events table colours each kind: what needs eyes, what went well, the rest plain.
BAD_EVENTS = (ServiceEventKind.UNPLACED, ServiceEventKind.OUT_OF_ROTATION,
              ServiceEventKind.ROLLED_BACK)
GOOD_EVENTS = (ServiceEventKind.PLACED, ServiceEventKind.INTO_ROTATION,
               ServiceEventKind.ROLLOUT_SUCCEEDED, ServiceEventKind.HEALED)
# What a page shows of a service's desired config, in the form's order.
CONFIG_FIELDS = ("model", "vllm_version", "args", "env", "drain_timeout_s", "replicas",
                 "selector", "gpu_model", "router_host_id", "router_port", "router_policy",
                 "strategy", "max_unavailable", "max_surge", "canary_window_s",
                 "scaling_mode", "min_replicas", "max_replicas", "scaling")


@services_access
def service_list(request: HttpRequest) -> HttpResponse:
    rows = Service.objects.select_related("router_host").annotate(
        ready=Count("replica_set", filter=Q(replica_set__state=DeploymentState.READY)),
        routed=Count("replica_set", filter=Q(replica_set__in_rotation=True)),
        placed=Count("replica_set"),
    ).prefetch_related(Prefetch("rollouts", to_attr="running_rollouts",
                                queryset=Rollout.objects.filter(state=RolloutState.RUNNING)))
    return render(request, "web/services/list.html", {"services": rows.order_by("name")})


@dataclass
class ReplicaRow:
    """A replica as its row shows it: the deployment and what is read off it."""

    d: Deployment
    share: float | None
    time_to_ready: float | None
    steps: list[replica_facts.Step]


@services_access
def service(request: HttpRequest, service_id: int) -> HttpResponse:
    s = get_object_or_404(Service.objects.select_related("router_host"), pk=service_id)
    replicas = list(s.replica_set.select_related("host").order_by("replica", "id"))
    shares = replica_facts.traffic_shares(s, replicas)
    # One scale for every replica's start bar: the slowest start fills its cell.
    scale = max((replica_facts.started_s(d.start_phases) for d in replicas), default=0.0)
    rows = [ReplicaRow(d, shares.get(d.pk), replica_facts.time_to_ready(d.start_phases),
                       replica_facts.steps(d.start_phases, scale)) for d in replicas]
    config = desired_config(s)
    return render(request, "web/services/detail.html", {
        "s": s, "replicas": rows, "any_phases": any(row.steps for row in rows),
        "placement": s.placement if isinstance(s.placement, dict) else {},
        "rollouts": s.rollouts.select_related("started_by", "current")
                     .order_by("-started_at", "-id")[:ROLLOUTS_SHOWN],
        "events": s.events.select_related("deployment").order_by("-at", "-id")[:EVENTS_SHOWN],
        "scale_decisions": s.scale_decisions.select_related("deployment")
                            .order_by("-at", "-id")[:EVENTS_SHOWN],
        "revisions": s.revisions.select_related("author").order_by("-revision")
                       [:REVISIONS_SHOWN],
        "running": s.rollouts.filter(state=RolloutState.RUNNING).select_related("current")
                   .order_by("-started_at").first(),
        "bad_events": [k.value for k in BAD_EVENTS],
        "good_events": [k.value for k in GOOD_EVENTS],
        "phase_labels": list(replica_facts.PHASE_LABELS.items())[1:],
        "router": s.router_status if isinstance(s.router_status, dict) else {},
        "config": config, "code_loading": deployments.code_loading(config),
        "can_edit": request.user.has_perm(CHANGE),
        "can_delete": request.user.has_perm(DELETE)})


def desired_config(s: Service) -> dict:
    """The service's desired config as its page shows it: env values redacted."""
    config = {name.removesuffix("_id"): getattr(s, name) for name in CONFIG_FIELDS}
    config["router_host"] = s.router_host.hostname if s.router_host_id else None
    return deployments.redacted_config(config)


@create_access
def service_new(request: HttpRequest) -> HttpResponse:
    return _edit(request, Service())


@change_access
def service_edit(request: HttpRequest, service_id: int) -> HttpResponse:
    return _edit(request, get_object_or_404(Service, pk=service_id))


def _edit(request: HttpRequest, s: Service) -> HttpResponse:
    return edit_config(request, ServiceForm(request.POST or None, instance=s), services.save,
                       _saved, "web:service", "web/services/form.html", {"s": s})


def _saved(s: Service, creating: bool, made) -> str:
    if creating:
        placed = s.replicas - s.unplaced
        return (f"Service {s.name!r} created: {placed} of {s.replicas} replica"
                f"{'' if s.replicas == 1 else 's'} placed"
                + (f", {s.unplaced} unplaced (see why below)." if s.unplaced else "."))
    if made is None:
        return "Nothing changed: no new revision."
    return f"Saved as revision {s.revision}."


@services_access
@require_POST
def service_revert(request: HttpRequest, service_id: int) -> HttpResponse:
    s = get_object_or_404(Service, pk=service_id)
    try:
        revision = int(request.POST.get("revision", "")[:10])
        made = services.revert(s, revision, request.user, request.POST.get("reason", "")[:1000])
    except (ValueError, ValidationError) as exc:
        messages.error(request, f"Not reverted: {_why(exc)}")
    else:
        messages.success(request, f"Reverted to revision {revision} as revision {s.revision}."
                         if made else f"Revision {revision} is the config already.")
    return redirect(reverse("web:service", args=[s.pk]))


@delete_access
def service_delete(request: HttpRequest, service_id: int) -> HttpResponse:
    """GET asks for confirmation; POST deletes (its replicas drain and stop)."""
    s = get_object_or_404(Service.objects.select_related("router_host"), pk=service_id)
    if request.method != "POST":
        replicas = s.replica_set.select_related("host").order_by("replica", "id")
        return render(request, "web/services/delete.html", {"s": s, "replicas": replicas})
    services.delete(s, request.user)
    messages.success(request, f"Service {s.name!r} deleted: its replicas drain and stop.")
    return redirect(reverse("web:services"))
