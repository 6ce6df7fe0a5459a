from django.urls import path

from controlplane.web import views

app_name = "web"
urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("hosts/<int:host_id>/", views.host, name="host"),
    path("engines/<int:engine_id>/", views.engine, name="engine"),
    path("gpus/<int:gpu_id>/", views.gpu, name="gpu"),
    path("healthz", views.healthz, name="healthz"),
]
