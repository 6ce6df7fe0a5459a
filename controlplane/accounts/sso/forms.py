"""The password forms of the sign-in page and of /admin/, saying why a password is refused
while local sign-in is off (before it is tried: a refusal is no failed attempt for the login
throttle to count)."""

from __future__ import annotations

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from controlplane.accounts.sso.policy import password_refusal


class _LocalLoginSwitch:
    def clean(self):
        refusal = password_refusal(self.cleaned_data.get("username"))
        if refusal is not None:
            raise forms.ValidationError(refusal, code="local_login_off")
        return super().clean()


class PasswordLoginForm(_LocalLoginSwitch, AuthenticationForm):
    pass


class AdminPasswordLoginForm(_LocalLoginSwitch, AdminAuthenticationForm):
    pass
