"""The rule list and the rule editor, whose Preview shows what would fire now (nothing stored)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.alerts.models import AlertRule, AlertState
from controlplane.alerts.preview import QueryTimeout, preview
from controlplane.web.forms import AlertRuleForm
from controlplane.web.views.access import needs

EDIT_RULES = "alerts.change_alertrule"
rules_access = needs("alerts.view_alertrule", EDIT_RULES)


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
    may_edit = request.user.has_perm(EDIT_RULES)
    if request.method == "POST" and "preview" in request.POST and not may_edit:
        # A preview runs the draft's queries over the fleet: for those who may edit rules.
        raise PermissionDenied(f"previewing a rule needs the permission {EDIT_RULES}")
    form = AlertRuleForm(request.POST or None, instance=rule)
    if not may_edit:
        for field in form.fields.values():
            field.disabled = True
    result, preview_error, status = None, "", 200
    if request.method == "POST" and form.is_valid():
        if "preview" not in request.POST:
            saved = form.save()
            messages.success(request, f"Rule {saved.name!r} {'created' if creating else 'saved'}.")
            return redirect("web:alert_rule", rule_id=saved.id)
        try:
            result = preview(form.instance)  # the edited instance, never saved here
        except QueryTimeout as exc:
            preview_error, status = str(exc), 503
    firing = [] if creating else list(
        rule.alerts.filter(state__in=[AlertState.FIRING, AlertState.PENDING])
        .order_by("state", "target"))
    return render(request, "web/alerts/rule_edit.html", {
        "form": form, "rule": rule, "title": title, "pack_key": pack_key, "creating": creating,
        "preview": result, "preview_error": preview_error, "open_alerts": firing,
        "can_edit": may_edit, "tab": "rules"}, status=status)


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
