from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from controlplane.accounts.sso.views import SignInView
from controlplane.api.views.metrics import MetricsView

urlpatterns = [
    path("", include("controlplane.web.urls")),
    path("api/v1/", include("controlplane.api.urls")),
    path("metrics", MetricsView.as_view(), name="metrics"),
    path("accounts/login/", SignInView.as_view(), name="login"),
    path("oidc/", include("controlplane.accounts.sso.urls")),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]

# 503 + Retry-After while the database is unreachable; any other error stays a 500.
handler500 = "controlplane.web.views.errors.server_error"
