"""The rule list and the rule editor, whose Preview shows what would fire now (nothing stored)."""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.alerts.models import AlertRule, AlertState
from controlplane.alerts.preview import preview
from controlplane.web.forms import AlertRuleForm
from controlplane.web.views.access import needs

rules_access = needs("alerts.view_alertrule", "alerts.change_alertrule")


@rules_access
def alert_rules(request: HttpRequest) -> HttpResponse:
    rules = AlertRule.objects.annotate(
        firing=Count("alerts", filter=Q(alerts__state=AlertState.FIRING)),
        pending=Count("alerts", filter=Q(alerts__state=AlertState.PENDING))).order_by("name")
    return render(request, "web/alerts/rules.html", {"rules": rules, "tab": "rules"})


@rules_access
def alert_rule_new(request: HttpRequest) -> HttpResponse:
    return edit_rule(request, AlertRule())


@rules_access
def alert_rule(request: HttpRequest, rule_id: int) -> HttpResponse:
    return edit_rule(request, get_object_or_404(AlertRule, pk=rule_id))


def edit_rule(request: HttpRequest, rule: AlertRule) -> HttpResponse:
    """GET shows the form; POST with ``preview`` validates and previews the unsaved rule; any
    other POST validates and saves."""
    creating, title, pack_key = rule.pk is None, rule.name, rule.pack_key
    form = AlertRuleForm(request.POST or None, instance=rule)
    if not request.user.has_perm("alerts.change_alertrule"):
        for field in form.fields.values():
            field.disabled = True
    result = None
    if request.method == "POST" and form.is_valid():
        if "preview" not in request.POST:
            saved = form.save()
            messages.success(request, f"Rule {saved.name!r} {'created' if creating else 'saved'}.")
            return redirect("web:alert_rule", rule_id=saved.id)
        result = preview(form.instance)  # the edited instance, never saved here
    firing = [] if creating else list(
        rule.alerts.filter(state__in=[AlertState.FIRING, AlertState.PENDING])
        .order_by("state", "target"))
    return render(request, "web/alerts/rule_edit.html", {
        "form": form, "rule": rule, "title": title, "pack_key": pack_key, "creating": creating,
        "preview": result, "open_alerts": firing,
        "can_edit": request.user.has_perm("alerts.change_alertrule"),
        "tab": "rules"})


@rules_access
@require_POST
def alert_rule_delete(request: HttpRequest, rule_id: int) -> HttpResponse:
    rule = get_object_or_404(AlertRule, pk=rule_id)
    if rule.pack_key:
        # The pack loader would bring it back after the next migrate: disable it instead.
        messages.error(request, "A rule of the default pack cannot be deleted; disable it.")
        return redirect("web:alert_rule", rule_id=rule.id)
    rule.delete()
    messages.success(request, f"Rule {rule.name!r} deleted with its alerts.")
    return redirect("web:alert_rules")
