"""Silences: the active and expired ones, what each covers now, a form to add one, expire.

Any signed-in user may silence: keeping a known problem quiet is an on-call decision."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from controlplane.alerts.models import Alert, AlertState, Silence
from controlplane.alerts.silences import create_silence, expire_silence, silence_matches
from controlplane.web.forms import SilenceForm, matcher_lines
from controlplane.web.views.access import needs

silences_access = needs("alerts.view_silence", "alerts.add_silence")

EXPIRED_SHOWN = 50


@dataclass
class SilenceRow:
    silence: Silence
    covers: list[Alert]
    now: datetime

    @property
    def started(self) -> bool:
        return self.silence.starts_at <= self.now

    @property
    def matcher_text(self) -> list[str]:
        return matcher_lines(self.silence.matchers).splitlines()


def silence_rows(now: datetime) -> tuple[list[SilenceRow], list[SilenceRow]]:
    """(active or not yet started, recently expired); each active one with the open alerts
    its matchers match now."""
    open_alerts = list(Alert.objects.select_related("rule").filter(
        state__in=[AlertState.FIRING, AlertState.PENDING]).order_by("id"))
    active = [SilenceRow(s, [a for a in open_alerts if silence_matches(s, a.labels)]
                         if s.starts_at <= now else [], now)
              for s in Silence.objects.filter(ends_at__gt=now).order_by("ends_at")]
    expired = [SilenceRow(s, [], now)
               for s in Silence.objects.filter(ends_at__lte=now).order_by("-ends_at")
               [:EXPIRED_SHOWN]]
    return active, expired


@silences_access
def silences(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = own_name(request, SilenceForm(request.POST, initial=_author(request)))
        if form.is_valid() and (silence := save_silence(request, form)):
            messages.success(request, f"Silence {silence.id} created until "
                                      f"{silence.ends_at:%Y-%m-%d %H:%M} UTC.")
            return redirect("web:silences")
    else:
        form = own_name(request, SilenceForm(
            initial={**_author(request), "matchers": request.GET.get("matchers", "")}))
    active, expired = silence_rows(timezone.now())
    return render(request, "web/alerts/silences.html", {
        "form": form, "active": active, "expired": expired, "expired_shown": EXPIRED_SHOWN,
        "tab": "silences"})


def _author(request: HttpRequest) -> dict[str, str]:
    return {"author": request.user.get_username()}


def own_name(request: HttpRequest, form: SilenceForm) -> SilenceForm:
    """The author is the signed-in user, shown and not editable: a posted author is ignored
    (a disabled field takes its initial value), and create_silence names the user anyway."""
    form.fields["author"].disabled = True
    form.fields["author"].help_text = "you: a silence is in its creator's name"
    return form


def save_silence(request: HttpRequest, form: SilenceForm) -> Silence | None:
    data = form.cleaned_data
    try:
        return create_silence(matchers=data["matchers"], starts_at=data["starts_at"],
                              ends_at=data["ends_at"], author=data["author"],
                              comment=data["comment"], created_by=request.user)
    except ValidationError as exc:
        for name, errors in exc.message_dict.items():
            form.add_error(name if name in form.fields else None, errors)
        return None


@silences_access
@require_POST
def silence_expire(request: HttpRequest, silence_id: int) -> HttpResponse:
    silence = get_object_or_404(Silence, pk=silence_id)
    expire_silence(silence)
    messages.success(request, f"Silence {silence.id} expired.")
    return redirect("web:silences")
