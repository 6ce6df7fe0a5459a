from django.apps import AppConfig


class SsoConfig(AppConfig):
    """Sign-in through the organisation's identity provider."""

    name = "controlplane.accounts.sso"
    label = "sso"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib import admin

        from controlplane.accounts.sso.forms import AdminPasswordLoginForm

        # /admin/ has a sign-in form of its own: it refuses the same passwords, with the
        # same message, as the sign-in page.
        admin.site.login_form = AdminPasswordLoginForm
