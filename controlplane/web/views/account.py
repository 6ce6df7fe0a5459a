"""Your API tokens (create, revoke; admins see everyone's and the agent tokens) and, for
admins, the audit log."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from controlplane.audit.models import AuditEntry
from controlplane.fleet import tokens
from controlplane.fleet.models import AgentToken, ApiToken, TokenScope
from controlplane.web.views.access import needs

AUDIT_PAGE = 100


class NewTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="To recognise it by, e.g. grafana")
    scope = forms.ChoiceField(choices=TokenScope.choices, initial=TokenScope.READ)
    expires_in_days = forms.IntegerField(min_value=1, label="Expires in (days)")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["expires_in_days"].initial = settings.PITWALL["API_TOKEN_DEFAULT_DAYS"]

    def clean_expires_in_days(self) -> int:
        days, bound = self.cleaned_data["expires_in_days"], settings.PITWALL["API_TOKEN_MAX_DAYS"]
        if days > bound:
            raise forms.ValidationError(f"at most {bound} days (PITWALL_API_TOKEN_MAX_DAYS)")
        return days


@login_required
def api_tokens(request: HttpRequest) -> HttpResponse:
    form, issued = NewTokenForm(request.POST or None), None
    if request.method == "POST" and form.is_valid():
        days = timedelta(days=form.cleaned_data["expires_in_days"])
        issued = tokens.issue_api_token(request.user.get_username(), form.cleaned_data["name"],
                                        form.cleaned_data["scope"], timezone.now() + days)
        form = NewTokenForm()
    everyone = request.user.has_perm("fleet.view_apitoken")
    rows = ApiToken.objects.select_related("user").order_by("-created_at", "-id")
    return render(request, "web/account/tokens.html", {
        "form": form, "issued": issued, "everyone": everyone, "now": timezone.now(),
        "tokens": rows if everyone else rows.filter(user=request.user),
        "agent_tokens": (AgentToken.objects.select_related("host").order_by("-created_at")
                         if request.user.has_perm("fleet.view_agenttoken") else None)})


@login_required
@require_POST
def api_token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id)
    if token.user_id != request.user.pk and not request.user.has_perm("fleet.change_apitoken"):
        raise PermissionDenied("only its user or an admin may revoke this token")
    tokens.revoke_api_token(token)
    messages.success(request, f"Token {token.name or token.lookup} revoked.")
    return redirect("web:tokens")


@needs("fleet.view_agenttoken", "fleet.change_agenttoken")
@require_POST
def agent_token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(AgentToken.objects.select_related("host"), pk=token_id)
    tokens.revoke_agent_token(token)
    messages.success(request, f"Agent token of {token.host.hostname} revoked.")
    return redirect("web:tokens")


AUDIT_FILTERS = {"actor": 150, "action": 24, "target_type": 40, "target_id": 64}


@needs("audit.view_auditentry")
def audit(request: HttpRequest) -> HttpResponse:
    rows = AuditEntry.objects.order_by("-at", "-id")
    chosen = {}
    for name, bound in AUDIT_FILTERS.items():
        value = request.GET.get(name, "")[:bound].strip()
        if value:
            chosen[name] = value
            rows = rows.filter(**{name: value})
    page = Paginator(rows, AUDIT_PAGE).get_page(request.GET.get("page"))
    kinds = AuditEntry.objects.order_by().values_list("target_type", flat=True).distinct()
    return render(request, "web/account/audit.html", {
        "page": page, "chosen": chosen, "target_types": sorted(kinds),
        "actions": ["created", "changed", "deleted", "acknowledged", "unacknowledged"]})
