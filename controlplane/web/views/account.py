"""Your API tokens (create, revoke; admins see everyone's and the agent tokens) and, for
admins, the users with their roles and the audit log."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import IntegrityError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.accounts import users
from controlplane.accounts.roles import ORDER, role_of
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
        days = self.cleaned_data["expires_in_days"]
        if problem := tokens.lifetime_problem(days):
            raise forms.ValidationError(problem)
        return days


@login_required
def api_tokens(request: HttpRequest) -> HttpResponse:
    form, issued = NewTokenForm(request.POST or None), None
    if request.method == "POST" and form.is_valid():
        issued = tokens.issue_api_token(request.user.get_username(), form.cleaned_data["name"],
                                        form.cleaned_data["scope"],
                                        tokens.expiry_after(form.cleaned_data["expires_in_days"]))
        form = NewTokenForm()
    everyone = request.user.has_perm("fleet.view_apitoken")
    rows = ApiToken.objects.select_related("user").order_by("-created_at", "-id")
    return render(request, "web/account/tokens.html", {
        "form": form, "issued": issued, "everyone": everyone,
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


class NewUserForm(forms.Form):
    username = forms.RegexField(r"^[\w.@+-]{1,150}$", max_length=150)
    email = forms.EmailField(required=False)
    password = forms.CharField(widget=forms.PasswordInput, max_length=256)
    role = forms.ChoiceField(choices=[("", "no role"), *((r, r) for r in ORDER)], required=False)


@needs("auth.view_user", "auth.change_user")
def user_list(request: HttpRequest) -> HttpResponse:
    form = NewUserForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            users.create_user(request.user, data["username"], data["password"],
                              data["role"] or None, data["email"])
            messages.success(request, f"User {data['username']} created.")
            return redirect("web:users")
        except ValidationError as exc:
            form.add_error("password", exc)
        except IntegrityError:
            form.add_error("username", "a user with this name exists")
    rows = get_user_model().objects.prefetch_related("groups").order_by("username")
    return render(request, "web/account/users.html", {
        "form": form, "roles": ORDER,
        "rows": [(u, role_of(u)) for u in rows]})


@needs("auth.view_user", "auth.change_user")
@require_POST
def user_change(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    role = request.POST.get("role", "")
    try:
        if role not in ("", *ORDER):
            raise users.Refused(f"unknown role {role[:20]!r}")
        if role != (role_of(user) or ""):
            users.set_role(request.user, user, role or None)
        active = request.POST.get("is_active") == "on"
        if active != user.is_active:
            users.set_active(request.user, user, active)
        messages.success(request, f"User {user.username} saved.")
    except users.Refused as exc:
        messages.error(request, f"User {user.username} not changed: {exc}")
    return redirect("web:users")
