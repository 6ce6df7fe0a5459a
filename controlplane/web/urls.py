from django.urls import path

from controlplane.web import views

app_name = "web"
urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("hosts/<int:host_id>/", views.host, name="host"),
    path("engines/<int:engine_id>/", views.engine, name="engine"),
    path("gpus/<int:gpu_id>/", views.gpu, name="gpu"),
    path("alerts/", views.alerts, name="alerts"),
    # Notifications link here as /alerts/<id> (delivery.dispatch): with or without the slash.
    path("alerts/<int:alert_id>/", views.alert, name="alert"),
    path("alerts/<int:alert_id>", views.alert),
    path("alerts/<int:alert_id>/ack/", views.alert_ack, name="alert_ack"),
    path("alerts/rules/", views.alert_rules, name="alert_rules"),
    path("alerts/rules/new/", views.alert_rule_new, name="alert_rule_new"),
    path("alerts/rules/<int:rule_id>/", views.alert_rule, name="alert_rule"),
    path("alerts/rules/<int:rule_id>/delete/", views.alert_rule_delete,
         name="alert_rule_delete"),
    path("alerts/silences/", views.silences, name="silences"),
    path("alerts/silences/<int:silence_id>/expire/", views.silence_expire,
         name="silence_expire"),
    path("alerts/channels/", views.channels, name="channels"),
    path("alerts/channels/<int:channel_id>/test/", views.channel_test, name="channel_test"),
    path("alerts/channels/<int:channel_id>/enable/", views.channel_enable,
         name="channel_enable"),
    path("deployments/", views.deployment_list, name="deployments"),
    path("deployments/<int:deployment_id>/", views.deployment, name="deployment"),
    path("deployments/<int:deployment_id>/revert/", views.deployment_revert,
         name="deployment_revert"),
    path("suggestions/", views.suggestion_list, name="suggestions"),
    path("suggestions/<int:suggestion_id>/<str:action>/", views.suggestion_action,
         name="suggestion_action"),
    path("account/tokens/", views.api_tokens, name="tokens"),
    path("account/tokens/<int:token_id>/revoke/", views.api_token_revoke, name="token_revoke"),
    path("account/agent-tokens/<int:token_id>/revoke/", views.agent_token_revoke,
         name="agent_token_revoke"),
    path("account/users/", views.user_list, name="users"),
    path("account/users/<int:user_id>/", views.user_change, name="user_change"),
    path("audit/", views.audit, name="audit"),
    path("healthz", views.healthz, name="healthz"),
]
