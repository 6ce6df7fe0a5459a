"""Deployments: what each vLLM instance should run, what its agent says runs, its log tail and
its revisions; deployers create, change, disable, revert and delete them here as through the
API, with the same service (``fleet.deployments``: checks, revisions, the audit log)."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Model
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from agents import vllm_args
from controlplane.fleet import deployments, replica_facts
from controlplane.fleet.models import Deployment, Engine
from controlplane.web.forms import DeploymentForm, add_errors
from controlplane.web.views.access import needs
from controlplane.web.views.suggestions import annotated

ADD, CHANGE, DELETE = ("fleet.add_deployment", "fleet.change_deployment",
                       "fleet.delete_deployment")
deployments_access = needs("fleet.view_deployment", CHANGE)
# The form pages are for those who may use them: a GET without the permission is a 403 too.
create_access = needs(ADD, ADD)
change_access = needs(CHANGE, CHANGE)
delete_access = needs(DELETE, DELETE)

REVISIONS_SHOWN = 20
SUGGESTIONS_SHOWN = 20


@deployments_access
def deployment_list(request: HttpRequest) -> HttpResponse:
    rows = Deployment.objects.select_related("host", "service").order_by("host__hostname",
                                                                           "name")
    return render(request, "web/deployments/list.html", {"deployments": rows})


@deployments_access
def deployment(request: HttpRequest, deployment_id: int) -> HttpResponse:
    d = get_object_or_404(Deployment.objects.select_related("host", "service"),
                          pk=deployment_id)
    engine = Engine.objects.filter(host_id=d.host_id, name=d.engine_name).first()
    revisions = d.revisions.select_related("author").order_by("-revision")[:REVISIONS_SHOWN]
    suggestions = annotated(d.suggestions.select_related("decided_by")
                            .order_by("-created_at")[:SUGGESTIONS_SHOWN])
    config = deployments.desired_config(d)  # env values redacted: write-only
    return render(request, "web/deployments/detail.html", {
        "d": d, "engine": engine, "revisions": revisions,
        # A service's replica changes through its service: the page links there instead.
        "can_edit": request.user.has_perm(CHANGE) and d.service_id is None,
        "can_delete": request.user.has_perm(DELETE) and d.service_id is None,
        "config": config, "code_loading": deployments.code_loading(config),
        "time_to_ready": replica_facts.time_to_ready(d.start_phases),
        "steps": replica_facts.steps(d.start_phases),
        "suggestions": suggestions})


def owned_by_service(request: HttpRequest, d: Deployment) -> HttpResponse | None:
    """A replica of a service changes only through its service (``deployments.save`` would
    refuse it): back to its page, with where to go instead; None for any other deployment."""
    if d.service_id is None:
        return None
    messages.error(request, f"{d.name} is a replica of service {d.service.name!r}: change "
                            f"the service instead.")
    return redirect(reverse("web:deployment", args=[d.pk]))


@deployments_access
@require_POST
def deployment_revert(request: HttpRequest, deployment_id: int) -> HttpResponse:
    d = get_object_or_404(Deployment.objects.select_related("service"), pk=deployment_id)
    if refused := owned_by_service(request, d):
        return refused
    try:
        revision = int(request.POST.get("revision", ""))
        made = deployments.revert(d, revision, request.user, request.POST.get("reason", ""))
    except (ValueError, ValidationError) as exc:
        messages.error(request, f"Not reverted: {_why(exc)}")
    else:
        messages.success(request, f"Reverted to revision {revision} as revision {d.revision}."
                         if made else f"Revision {revision} is the config already.")
    return redirect(reverse("web:deployment", args=[d.pk]))


@create_access
def deployment_new(request: HttpRequest) -> HttpResponse:
    return _edit(request, Deployment())


@change_access
def deployment_edit(request: HttpRequest, deployment_id: int) -> HttpResponse:
    d = get_object_or_404(Deployment.objects.select_related("host", "service"),
                          pk=deployment_id)
    return owned_by_service(request, d) or _edit(request, d)


def _edit(request: HttpRequest, d: Deployment) -> HttpResponse:
    return edit_config(request, DeploymentForm(request.POST or None, instance=d),
                       deployments.save, _saved, "web:deployment",
                       "web/deployments/form.html", {"d": d})


def edit_config(request: HttpRequest, form: ModelForm, save: Callable[..., object],
                saved: Callable[[Model, bool, object], str], detail: str, template: str,
                context: dict) -> HttpResponse:
    """A deployment's or a service's form. GET: the form. POST: shapes and the domain's checks
    (400 naming each field, nothing stored), then ``save``: 403 for what needs
    fleet.deploy_code, as the API; a conflict found while saving (a GPU or a name taken
    meanwhile) is a 400 under its field."""
    creating = form.instance.pk is None
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                made = save(form.instance, request.user, form.cleaned_data.get("reason", ""))
            except deployments.CodeNotPermitted as exc:
                form.add_error(None, f"Needs the permission {deployments.DEPLOY_CODE}.")
                add_errors(form, exc)
                status = 403
            except ValidationError as exc:
                add_errors(form, exc)
            else:
                messages.success(request, saved(form.instance, creating, made))
                return redirect(reverse(detail, args=[form.instance.pk]))
    return render(request, template, {
        **context, "form": form, "creating": creating, "versions": vllm_args.KNOWN_VERSIONS,
        "catalog": _catalog(form["vllm_version"].value() or vllm_args.DEFAULT_VERSION),
        "may_load_code": deployments.may_load_code(request.user)}, status=status)


def _saved(d: Deployment, creating: bool, made) -> str:
    if creating:
        return f"Deployment {d.name!r} created as revision 1."
    if made is None:
        return "Nothing changed: no new revision."
    return f"Saved as revision {d.revision}: the agent applies it by a graceful restart."


def _catalog(version: str) -> list[vllm_args.ArgSpec]:
    """The arguments the form's version accepts, for the reference beside the field."""
    try:
        return list(vllm_args.available(version).values())
    except ValueError:
        return []


@change_access
@require_POST
def deployment_enabled(request: HttpRequest, deployment_id: int) -> HttpResponse:
    """Disable (the agent drains and stops it, the config is kept) or enable again: a new
    revision like any change."""
    d = get_object_or_404(Deployment.objects.select_related("service"), pk=deployment_id)
    if refused := owned_by_service(request, d):
        return refused
    d.enabled = request.POST.get("enabled") == "1"
    verb = "enabled" if d.enabled else "disabled"
    reason = request.POST.get("reason", "")[:1000] or f"{verb} from the deployment's page"
    try:
        made = deployments.save(d, request.user, reason)
    except ValidationError as exc:  # CodeNotPermitted too, though enabled is neutral
        messages.error(request, f"Not {verb}: {_why(exc)}")
    else:
        messages.success(request, f"{d.name} {verb} as revision {d.revision}." if made
                         else f"{d.name} was {verb} already.")
    return redirect(reverse("web:deployment", args=[d.pk]))


@delete_access
def deployment_delete(request: HttpRequest, deployment_id: int) -> HttpResponse:
    """GET asks for confirmation; POST deletes (the agent drains and stops it)."""
    d = get_object_or_404(Deployment.objects.select_related("host", "service"),
                          pk=deployment_id)
    if refused := owned_by_service(request, d):
        return refused
    if request.method != "POST":
        return render(request, "web/deployments/delete.html", {"d": d})
    deployments.delete(d)
    messages.success(request, f"Deployment {d.name!r} deleted: the agent on "
                              f"{d.host.hostname} drains and stops it.")
    return redirect(reverse("web:deployments"))


def _why(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        if hasattr(exc, "error_dict"):
            return "; ".join(f"{field}: {m}" for field, msgs in exc.message_dict.items()
                             for m in msgs)
        return "; ".join(exc.messages)
    return "choose a revision"
