from django.urls import path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter

from controlplane.api.permissions import SignedIn
from controlplane.api.views.alerts import AlertRuleViewSet, AlertViewSet, SilenceViewSet
from controlplane.api.views.audit import AuditViewSet
from controlplane.api.views.channels import ChannelViewSet, NotificationViewSet
from controlplane.api.views.deployments import (
    AgentConfigView,
    AgentStatusView,
    DeploymentViewSet,
)
from controlplane.api.views.docs import SwaggerView
from controlplane.api.views.efficiency import (
    EngineEfficiencyListView,
    EngineEfficiencyView,
    ModelEfficiencyListView,
)
from controlplane.api.views.engines import EngineViewSet
from controlplane.api.views.export import PrometheusExportView
from controlplane.api.views.gpus import GpuViewSet
from controlplane.api.views.hosts import HostViewSet
from controlplane.api.views.series import SeriesView
from controlplane.api.views.services import ServiceViewSet
from controlplane.api.views.suggestions import SuggestionViewSet
from controlplane.api.views.tokens import AgentTokenViewSet, ApiTokenViewSet
from controlplane.api.views.users import UserViewSet

router = DefaultRouter(use_regex_path=False)
router.include_format_suffixes = False  # /hosts/1.json adds nothing to ?format=json
router.register("hosts", HostViewSet, basename="host")
router.register("gpus", GpuViewSet, basename="gpu")
router.register("engines", EngineViewSet, basename="engine")
router.register("deployments", DeploymentViewSet, basename="deployment")
router.register("services", ServiceViewSet, basename="service")
router.register("suggestions", SuggestionViewSet, basename="suggestion")
router.register("alert-rules", AlertRuleViewSet, basename="alert-rule")
router.register("alerts", AlertViewSet, basename="alert")
router.register("silences", SilenceViewSet, basename="silence")
router.register("channels", ChannelViewSet, basename="channel")
router.register("notifications", NotificationViewSet, basename="notification")
router.register("tokens", ApiTokenViewSet, basename="token")
router.register("agent-tokens", AgentTokenViewSet, basename="agent-token")
router.register("audit", AuditViewSet, basename="audit")
router.register("users", UserViewSet, basename="user")

urlpatterns = [
    # The schema maps every endpoint, parameter and limit: for signed-in users (session or
    # user API token, any role), as the API itself is (drf-spectacular serves it to anyone).
    path("schema/", SpectacularAPIView.as_view(permission_classes=[SignedIn]), name="schema"),
    # The split view serves its start-up script as a file: the Content-Security-Policy allows
    # no inline script without a nonce. A browser without a session is sent to sign in.
    path("docs/", SwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("series/", SeriesView.as_view(), name="series"),
    path("efficiency/engines/", EngineEfficiencyListView.as_view(), name="efficiency-engines"),
    path("efficiency/engines/<int:engine_id>/", EngineEfficiencyView.as_view(),
         name="efficiency-engine"),
    path("efficiency/models/", ModelEfficiencyListView.as_view(), name="efficiency-models"),
    path("export/prometheus", PrometheusExportView.as_view(), name="export-prometheus"),
    path("agent/config", AgentConfigView.as_view(), name="agent-config"),
    path("agent/status", AgentStatusView.as_view(), name="agent-status"),
    *router.urls,
]
