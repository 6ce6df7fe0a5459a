from django.urls import path

from controlplane.accounts.sso import views

# The names are the library's: its views reverse them.
urlpatterns = [
    path("authenticate/", views.authenticate, name="oidc_authentication_init"),
    path("callback/", views.callback, name="oidc_authentication_callback"),
]
