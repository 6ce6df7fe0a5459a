"""Deployments: what each vLLM instance should run, what its agent says runs, its log tail and
its revisions (staff may revert to one)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlplane.fleet import deployments
from controlplane.fleet.models import Deployment, Engine
from controlplane.web.views.access import needs
from controlplane.web.views.suggestions import annotated

deployments_access = needs("fleet.view_deployment", "fleet.change_deployment")

REVISIONS_SHOWN = 20
SUGGESTIONS_SHOWN = 20


@deployments_access
def deployment_list(request: HttpRequest) -> HttpResponse:
    rows = Deployment.objects.select_related("host").order_by("host__hostname", "name")
    return render(request, "web/deployments/list.html", {"deployments": rows})


@deployments_access
def deployment(request: HttpRequest, deployment_id: int) -> HttpResponse:
    d = get_object_or_404(Deployment.objects.select_related("host"), pk=deployment_id)
    engine = Engine.objects.filter(host_id=d.host_id, name=d.engine_name).first()
    revisions = d.revisions.select_related("author").order_by("-revision")[:REVISIONS_SHOWN]
    suggestions = annotated(d.suggestions.select_related("decided_by")
                            .order_by("-created_at")[:SUGGESTIONS_SHOWN])
    config = deployments.desired_config(d)  # env values redacted: write-only
    return render(request, "web/deployments/detail.html", {
        "d": d, "engine": engine, "revisions": revisions,
        "can_edit": request.user.has_perm("fleet.change_deployment"),
        "config": config, "code_loading": deployments.code_loading(config),
        "suggestions": suggestions})


@deployments_access
@require_POST
def deployment_revert(request: HttpRequest, deployment_id: int) -> HttpResponse:
    d = get_object_or_404(Deployment, pk=deployment_id)
    try:
        revision = int(request.POST.get("revision", ""))
        made = deployments.revert(d, revision, request.user, request.POST.get("reason", ""))
    except (ValueError, ValidationError) as exc:
        messages.error(request, f"Not reverted: {_why(exc)}")
    else:
        messages.success(request, f"Reverted to revision {revision} as revision {d.revision}."
                         if made else f"Revision {revision} is the config already.")
    return redirect(reverse("web:deployment", args=[d.pk]))


def _why(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(exc.messages)
    return "choose a revision"
