"""Suggestions: the open ones across the fleet, deployments' and engines' Pitwall does not run
(reports with a command fragment to paste), and the actions on one (staff): accept, dismiss,
revert. Each deployment's page lists its own (deployments.py)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlplane.evidence_links import with_links
from controlplane.tuning import service
from controlplane.tuning.models import State, Suggestion
from controlplane.web.views.access import needs, same_site

suggestions_access = needs("tuning.view_suggestion", "tuning.decide_suggestion")

RECENT = 50
ACTIONS = {"accept": service.accept, "dismiss": service.dismiss, "revert": service.revert}
DONE = {"accept": "accepted: the agent applies it by a graceful restart",
        "dismiss": "dismissed", "revert": "reverted"}


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
    base = Suggestion.objects.select_related("deployment__host", "engine__host", "decided_by")
    # What can be applied first (reports last), the most confident first within each.
    open_ = sorted(annotated(base.filter(state=State.OPEN)),
                   key=lambda s: (not s.changes, -s.confidence, -s.id))
    conf = settings.PITWALL
    return render(request, "web/suggestions/list.html", {
        "open": open_,
        "recent": annotated(base.exclude(state=State.OPEN).order_by("-updated_at")[:RECENT]),
        "can_edit": request.user.has_perm("tuning.decide_suggestion"),
        "interval_s": conf["TUNING_INTERVAL_S"],
        "window_min": conf["TUNING_WINDOW_S"] // 60})


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
