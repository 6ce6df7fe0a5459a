"""PATCH /api/v1/hosts/{id}/ {"labels": {...}}: deployers set the labels services' selectors
match; the bounds are the agent's; a refusal names the field and stores nothing; the audit log
records who changed what."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from controlplane.audit.models import AuditEntry
from controlplane.fleet.models import Host, TokenScope
from controlplane.fleet.tokens import issue_api_token
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role


@pytest.fixture
def deployer(db) -> APIClient:
    user_with_role("dora", "deployer")
    return bearer_client(issue_api_token("dora", name="tests"))


@pytest.fixture
def labelled(db) -> Host:
    return Host.objects.create(hostname="gpu-a", inventory={"labels": {"zone": "rack-3",
                                                                       "pool": "batch"}})


def url(host: Host) -> str:
    return f"/api/v1/hosts/{host.id}/"


def test_a_deployer_sets_labels_and_the_host_shows_them_over_the_agents(deployer, labelled):
    reply = deployer.patch(url(labelled), {"labels": {"pool": "online", "gpu.kind/x": "H100"}},
                           format="json")
    assert reply.status_code == 200, reply.json()
    body = reply.json()
    assert body["labels"] == {"pool": "online", "gpu.kind/x": "H100"}
    assert body["agent_labels"] == {"zone": "rack-3", "pool": "batch"}
    # Set labels win over the agent's of the same key.
    assert body["all_labels"] == {"zone": "rack-3", "pool": "online", "gpu.kind/x": "H100"}
    assert Host.objects.get(pk=labelled.pk).labels == {"pool": "online", "gpu.kind/x": "H100"}
    entry = AuditEntry.objects.get(target_type="host")
    assert (entry.actor, entry.action, entry.target) == ("dora", "changed", "gpu-a")
    assert entry.changes == {"labels": [{}, {"pool": "online", "gpu.kind/x": "H100"}]}


def test_the_same_labels_again_change_nothing_and_log_nothing(deployer, labelled):
    body = {"labels": {"pool": "online"}}
    assert deployer.patch(url(labelled), body, format="json").status_code == 200
    assert deployer.patch(url(labelled), body, format="json").status_code == 200
    assert AuditEntry.objects.filter(target_type="host").count() == 1


@pytest.mark.parametrize(("labels", "said"), [
    ({"Pool": "online"}, "key 'Pool'"),
    ({"pool-": "x"}, "key 'pool-'"),
    ({"k" * 64: "x"}, "…"),
    ({"pool": "on line"}, "pool: the value must be"),
    ({"pool": "x" * 64}, "at most 63"),
    ({"pool": 3}, "pool: the value must be a string"),
    ({f"k{i}": "v" for i in range(33)}, "at most 32 labels"),
    (["pool=online"], "an object of key: value strings"),
])
def test_bad_labels_are_a_400_naming_the_field_and_nothing_is_stored(deployer, labelled,
                                                                      labels, said):
    reply = deployer.patch(url(labelled), {"labels": labels}, format="json")
    assert reply.status_code == 400
    assert any(said in message for message in reply.json()["labels"]), reply.json()
    assert Host.objects.get(pk=labelled.pk).labels == {}
    assert not AuditEntry.objects.filter(target_type="host").exists()


def test_a_patch_without_labels_is_refused(deployer, labelled):
    reply = deployer.patch(url(labelled), {"hostname": "evil"}, format="json")
    assert reply.status_code == 400 and "labels" in reply.json()
    assert Host.objects.get(pk=labelled.pk).hostname == "gpu-a"


def test_an_operator_and_a_read_only_token_may_not_label_a_host(api, labelled):
    assert api.patch(url(labelled), {"labels": {"pool": "x"}}, format="json").status_code == 403
    user_with_role("root", "admin")
    read_only = bearer_client(issue_api_token("root", "ro", scope=TokenScope.READ))
    reply = read_only.patch(url(labelled), {"labels": {"pool": "x"}}, format="json")
    assert reply.status_code == 403 and "read-only" in reply.json()["detail"]
    assert Host.objects.get(pk=labelled.pk).labels == {}


def test_hosts_take_no_put_or_delete(deployer, labelled):
    assert deployer.put(url(labelled), {"labels": {}}, format="json").status_code == 405
    assert deployer.delete(url(labelled)).status_code == 405
