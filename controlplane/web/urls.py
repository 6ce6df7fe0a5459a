from django.urls import path

from controlplane.web import views

app_name = "web"
urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("healthz", views.healthz, name="healthz"),
]
