"""Suggestions: the Tuning page across the fleet, deployments' and engines' Pitwall does not run
(reports with a command fragment to paste), filtered and a page at a time, and the actions on one
(staff): accept, dismiss, revert. Each deployment's page lists its own (deployments.py)."""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Case, Q, QuerySet, Value, When
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlplane.evidence_links import with_links
from controlplane.fleet.models import Deployment, Engine, Host
from controlplane.tuning import service
from controlplane.tuning.models import Kind, State, Suggestion
from controlplane.web.views.access import needs, same_site

suggestions_access = needs("tuning.view_suggestion", "tuning.decide_suggestion")

PAGE_SIZE = 25
ALL_STATES = "all"
SERVER_NAME_MAX = 200  # Engine.name's max_length; a deployment's name is shorter
SERVER_NAMES_OFFERED = 200  # the datalist's bound: a hint, not the list of every server
ACTIONS = {"accept": service.accept, "dismiss": service.dismiss, "revert": service.revert}
DONE = {"accept": "accepted: the agent applies it by a graceful restart",
        "dismiss": "dismissed", "revert": "reverted"}
# What can be applied first (reports last), the most confident first within each.
REPORTS_LAST = Case(When(changes=[], then=Value(1)), default=Value(0))


class HostChoiceField(forms.ModelChoiceField):
    """A host by its id: anything but a positive int4 is refused before it reaches a query."""

    def to_python(self, value: object) -> Host | None:
        if value in self.empty_values:
            return None
        text = str(value)
        if not (text.isascii() and text.isdigit() and len(text) <= 10 and int(text) < 2**31):
            raise forms.ValidationError(self.error_messages["invalid_choice"],
                                        code="invalid_choice", params={"value": value})
        return super().to_python(text)


class SuggestionFilters(forms.Form):
    """The Tuning page's GET parameters. Bad values are errors naming the parameter (the
    messages echo at most 40 characters of what was sent)."""

    state = forms.ChoiceField(
        choices=[*State.choices, (ALL_STATES, "All")], required=False,
        error_messages={"invalid_choice": "%(value).40s is not a state"})
    kind = forms.ChoiceField(
        choices=[("", "Any"), *Kind.choices], required=False,
        error_messages={"invalid_choice": "%(value).40s is not a kind of suggestion"})
    host = HostChoiceField(
        Host.objects.only("id", "hostname").order_by("hostname"), required=False,
        empty_label="Any", error_messages={"invalid_choice": "no host has id %(value).40s"})
    server = forms.CharField(
        max_length=SERVER_NAME_MAX, required=False, label="Engine or deployment",
        error_messages={"max_length": "a name is at most %(limit_value)d characters"})
    watched = forms.ChoiceField(
        choices=[("", "Any"), ("false", "Deployments (run by Pitwall)"),
                 ("true", "Engines Pitwall only watches")],
        required=False, error_messages={"invalid_choice": "%(value).40s is not true or false"})

    def clean_state(self) -> str:
        return self.cleaned_data["state"] or State.OPEN

    def errors_by_parameter(self) -> list[str]:
        return [f"{name}: {error}" for name, errors in self.errors.items() for error in errors]

    def query(self) -> str:
        """The chosen filters as a query string, for page links that keep them."""
        chosen = {name: getattr(value, "pk", value) for name, value in self.cleaned_data.items()
                  if value not in (None, "")}
        return urlencode(chosen)


def filtered(chosen: dict) -> QuerySet[Suggestion]:
    rows = Suggestion.objects.select_related("deployment__host", "engine__host", "decided_by")
    if chosen["state"] != ALL_STATES:
        rows = rows.filter(state=chosen["state"])
    if chosen["kind"]:
        rows = rows.filter(kind=chosen["kind"])
    if host := chosen["host"]:
        rows = rows.filter(Q(deployment__host=host) | Q(engine__host=host))
    if name := chosen["server"]:
        rows = rows.filter(Q(engine__name=name) | Q(deployment__name=name))
    if chosen["watched"]:
        rows = rows.filter(deployment__isnull=chosen["watched"] == "true")
    if chosen["state"] == State.OPEN:
        return rows.order_by(REPORTS_LAST, "-confidence", "-id")
    return rows.order_by("-updated_at", "-id")


def server_names(host: Host | None) -> list[str]:
    """The engine and deployment names to offer in the filter (of the host, when chosen)."""
    engines, deployments = Engine.objects.all(), Deployment.objects.all()
    if host is not None:
        engines, deployments = engines.filter(host=host), deployments.filter(host=host)
    return sorted({*distinct_names(engines), *distinct_names(deployments)})


def distinct_names(rows: QuerySet) -> list[str]:
    return list(rows.order_by().values_list("name", flat=True).distinct()[:SERVER_NAMES_OFFERED])


def annotated(suggestions) -> list[Suggestion]:
    """Each with its evidence's chart links and values as a person reads them."""
    rows = list(suggestions)
    for s in rows:
        s.linked_evidence = [{**e, "shown": shown(e)} for e in with_links(s.evidence)]
    return rows


def shown(item: dict) -> str:
    value = item.get("value")
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if not isinstance(value, int | float):
        return "–"
    if item.get("metric", "").endswith("_bytes") and "share" not in item.get("stat", ""):
        return f"{value / 2**30:.1f} GiB"
    return f"{value:g}"


@suggestions_access
def suggestion_list(request: HttpRequest) -> HttpResponse:
    # Open unless told otherwise, so that the form shows the state the list is in.
    form = SuggestionFilters({"state": State.OPEN, **request.GET.dict()})
    conf = settings.PITWALL
    context = {"form": form, "can_edit": request.user.has_perm("tuning.decide_suggestion"),
               "interval_s": conf["TUNING_INTERVAL_S"],
               "window_min": conf["TUNING_WINDOW_S"] // 60}
    if not form.is_valid():
        return render(request, "web/suggestions/list.html", status=400, context={
            **context, "problems": form.errors_by_parameter(), "server_names": []})
    chosen = form.cleaned_data
    page = Paginator(filtered(chosen), PAGE_SIZE).get_page(request.GET.get("page"))
    page.object_list = annotated(page.object_list)
    return render(request, "web/suggestions/list.html", {
        **context, "page": page, "query": form.query(),
        "narrowed": any(chosen[name] for name in ("kind", "host", "server", "watched")),
        "server_names": server_names(chosen["host"])})


@suggestions_access
@require_POST
def suggestion_action(request: HttpRequest, suggestion_id: int, action: str) -> HttpResponse:
    s = get_object_or_404(Suggestion, pk=suggestion_id)
    do = ACTIONS.get(action)
    if do is None:
        messages.error(request, f"Unknown action {action!r}.")
    else:
        try:
            do(s, request.user)
            messages.success(request, f"Suggestion #{s.pk} {DONE[action]}.")
        except service.Refused as exc:
            messages.error(request, f"Suggestion #{s.pk} not {DONE[action].split(':')[0]}: "
                                    f"{exc}")
    back = (reverse("web:deployment", args=[s.deployment_id]) if s.deployment_id is not None
            else reverse("web:suggestions"))
    return redirect(same_site(request, request.POST.get("next")) or back)
