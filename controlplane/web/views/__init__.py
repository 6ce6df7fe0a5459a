"""Server-rendered pages, one module per page; the browser draws the charts (static/web/)."""

from controlplane.web.views.account import (
    agent_token_revoke,
    api_token_revoke,
    api_tokens,
    audit,
    user_change,
    user_list,
)
from controlplane.web.views.alert_rules import (
    alert_rule,
    alert_rule_delete,
    alert_rule_new,
    alert_rules,
)
from controlplane.web.views.alerts import alert, alert_ack, alerts
from controlplane.web.views.channels import channel_enable, channel_test, channels
from controlplane.web.views.deployments import (
    deployment,
    deployment_delete,
    deployment_edit,
    deployment_enabled,
    deployment_list,
    deployment_new,
    deployment_revert,
)
from controlplane.web.views.efficiency import efficiency_page
from controlplane.web.views.engine import engine
from controlplane.web.views.fleet import fleet
from controlplane.web.views.gpu import gpu
from controlplane.web.views.health import healthz
from controlplane.web.views.host import host, host_labels_change
from controlplane.web.views.services import (
    service,
    service_delete,
    service_edit,
    service_list,
    service_new,
    service_revert,
)
from controlplane.web.views.silences import silence_expire, silences
from controlplane.web.views.suggestions import suggestion_action, suggestion_list

__all__ = [
    "efficiency_page",
    "agent_token_revoke", "api_token_revoke", "api_tokens", "audit", "user_change", "user_list",
    "alert", "alert_ack", "alert_rule", "alert_rule_delete", "alert_rule_new", "alert_rules",
    "alerts", "channel_enable", "channel_test", "channels", "deployment", "deployment_list",
    "deployment_revert", "deployment_new", "deployment_edit", "deployment_enabled",
    "deployment_delete", "engine", "fleet", "gpu", "healthz",
    "host", "host_labels_change", "service", "service_delete", "service_edit", "service_list",
    "service_new", "service_revert", "silence_expire", "silences", "suggestion_action",
    "suggestion_list",
]
