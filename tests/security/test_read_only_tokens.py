"""A read-only API token writes nothing, on any endpoint, whoever its user is: every unsafe
method of every path in the OpenAPI schema, sent with a read-only token of a superuser and of
an admin, is refused and leaves every table as it was."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.urls import resolve
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator

from controlplane.alerts.delivery.models import Channel
from controlplane.alerts.models import Alert, AlertRule, Silence
from controlplane.api.auth import ApiTokenAuthentication
from controlplane.fleet.models import ApiToken, Deployment, Gpu, Host, TokenScope
from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role

UNSAFE = ("post", "put", "patch", "delete")
# Written by every authenticated request, at most once a minute: not a change the token made.
BOOKKEEPING = {"last_used_at"}


@pytest.fixture
def objects(db) -> dict[str, int]:
    """One row behind each detail path, keyed by the path's first segment after /api/v1/;
    the tokens and the user belong to someone else, as an attacker's target would."""
    host = Host.objects.create(hostname="ro-node-1")
    Gpu.objects.create(host=host, index=0, uuid="GPU-ro-0")
    rule = AlertRule.objects.create(name="hot", metric="gpu.temp_c", aggregation="max",
                                    window_s=30, op=">", threshold=85)
    now = timezone.now()
    victim = user_with_role("victim", "deployer")
    issue_api_token("victim", "victim's")
    issue_agent_token("ro-node-1")
    return {
        "hosts": host.id, "deployments": Deployment.objects.create(
            host=host, name="llama", model="m", port=8000, gpu_indices=[0]).id,
        "alert-rules": rule.id,
        "alerts": Alert.objects.create(rule=rule, target=f"host:{host.id}", fingerprint="f",
                                       state="firing", host_id=host.id).id,
        "silences": Silence.objects.create(
            matchers=[{"label": "alertname", "op": "=", "value": "x"}], starts_at=now,
            ends_at=now + timedelta(hours=1), author="victim").id,
        "channels": Channel.objects.create(name="ops", kind="webhook",
                                           config={"url": "https://example.com/hook"}).id,
        "tokens": ApiToken.objects.get(user=victim).id,
        "agent-tokens": host.agent_tokens.get().id,
        "users": victim.id,
    }


def snapshot() -> dict[str, list]:
    """Every row of every table Django manages, but the bookkeeping columns."""
    rows = {}
    for model in apps.get_models():
        if not model._meta.managed:
            continue
        fields = [f.attname for f in model._meta.concrete_fields if f.name not in BOOKKEEPING]
        rows[model._meta.label] = list(model.objects.order_by("pk").values_list(*fields))
    return rows


def unsafe_operations() -> list[tuple[str, str]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [(method, path) for path, item in schema["paths"].items()
            for method in UNSAFE if method in item]


def concrete(path: str, ids: dict[str, int]) -> str:
    resource = path.removeprefix("/api/v1/").split("/")[0]
    return path.replace("{id}", str(ids.get(resource, 1))).replace("{engine_id}", "1")


def takes_user_tokens(url: str) -> bool:
    view = resolve(url).func
    classes = getattr(view, "cls", None) and view.cls.authentication_classes
    return any(issubclass(c, ApiTokenAuthentication) for c in classes or ())


@pytest.mark.parametrize("who", ["superuser", "admin"])
def test_a_read_only_token_writes_nothing_on_any_endpoint(objects, who):
    user = (user_with_role("root", None, is_superuser=True, is_staff=True)
            if who == "superuser" else user_with_role("root", "admin", is_staff=True))
    client = bearer_client(issue_api_token(user.username, "ro", scope=TokenScope.READ))
    operations = unsafe_operations()
    assert ("post", "/api/v1/tokens/{id}/revoke/") in operations and len(operations) >= 20
    before = snapshot()
    wrong = []
    for method, path in operations:
        url = concrete(path, objects)
        response = getattr(client, method)(url, {}, format="json")
        # The agent's own endpoints do not take user tokens at all: 401 before any scope.
        expected = 403 if takes_user_tokens(url) else 401
        if response.status_code != expected or (
                expected == 403 and "read-only" not in response.json()["detail"]):
            wrong.append(f"{method.upper()} {url}: {response.status_code} {response.content!r}")
    assert not wrong, "\n".join(wrong)
    assert snapshot() == before
