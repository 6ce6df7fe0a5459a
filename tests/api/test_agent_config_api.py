"""/api/v1/agent/config and /api/v1/agent/status: an agent reads and reports its own host."""

from __future__ import annotations

import pytest

from controlplane.fleet.models import Deployment
from controlplane.fleet.tokens import issue_agent_token
from tests.api.deploying import llama
from tests.support.clients import bearer_client

REPORT = {"id": 0, "revision": 1, "state": "ready", "since": 1764770000.5, "pid": 4242,
          "restarts": 1, "error": "", "argv": ["vllm", "serve", "m", "--port", "8000"],
          "log_tail": ["INFO:     Application startup complete."], "warnings": []}


def test_the_agent_gets_its_hosts_enabled_deployments_with_flags_rendered(staff, gpu_host):
    staff.post("/api/v1/deployments/", llama(gpu_host.host), format="json")
    staff.post("/api/v1/deployments/", llama(gpu_host.host, name="off", port=8001,
                                             gpu_indices=[1], enabled=False), format="json")
    config = gpu_host.agent.get("/api/v1/agent/config").json()
    assert config["version"] == 2
    [spec] = config["deployments"]
    assert spec["name"] == "llama-8b" and spec["gpu_indices"] == [0]
    assert spec["cpus"] == [0, 1, 2, 3] and spec["revision"] == 1
    flags = spec["argv"]
    assert flags[flags.index("--max-num-seqs") + 1] == "128"
    assert "--enable-prefix-caching" in flags
    assert "--shutdown-timeout" not in flags  # 0.11.0 has none (first in 0.18.0)


def test_the_drain_timeout_reaches_vllm_as_its_shutdown_timeout_where_it_has_one(
        staff, gpu_host):
    # 0.32.0 aborts running requests on SIGTERM unless it is given --shutdown-timeout.
    staff.post("/api/v1/deployments/", llama(gpu_host.host, vllm_version="0.32.0",
                                             drain_timeout_s=45), format="json")
    staff.post("/api/v1/deployments/", llama(gpu_host.host, name="own", port=8001,
                                             gpu_indices=[1], vllm_version="0.32.0",
                                             args={"shutdown_timeout": 5}), format="json")
    new, own = (s["argv"] for s in
                gpu_host.agent.get("/api/v1/agent/config").json()["deployments"])
    assert new[new.index("--shutdown-timeout") + 1] == "45"
    assert own.count("--shutdown-timeout") == 1 and own[own.index("--shutdown-timeout") + 1] == "5"


def test_an_agent_sees_no_other_hosts_deployments(staff, gpu_host, db):
    staff.post("/api/v1/deployments/", llama(gpu_host.host), format="json")
    token, _ = issue_agent_token("other-node")
    config = bearer_client(token).get("/api/v1/agent/config").json()
    assert config == {"version": 0, "deployments": [], "routers": []}


def test_user_tokens_and_anonymous_callers_are_refused(api, anonymous, gpu_host):
    assert api.get("/api/v1/agent/config").status_code == 401
    assert anonymous.get("/api/v1/agent/config").status_code in (401, 403)
    assert anonymous.post("/api/v1/agent/status", {"deployments": []},
                          format="json").status_code in (401, 403)


def test_a_report_is_stored_on_the_deployment(staff, gpu_host):
    made = staff.post("/api/v1/deployments/", llama(gpu_host.host), format="json").json()
    reply = gpu_host.agent.post("/api/v1/agent/status",
                                {"deployments": [{**REPORT, "id": made["id"]}]}, format="json")
    assert reply.status_code == 200 and reply.json() == {"stored": 1}
    status = staff.get(f"/api/v1/deployments/{made['id']}/").json()["status"]
    assert status["state"] == "ready" and status["pid"] == 4242 and status["restarts"] == 1
    assert status["log_tail"] == REPORT["log_tail"] and status["running_revision"] == 1


def test_reporting_another_hosts_deployment_is_forbidden_and_stores_nothing(staff, gpu_host):
    made = staff.post("/api/v1/deployments/", llama(gpu_host.host), format="json").json()
    token, _ = issue_agent_token("other-node")
    reply = bearer_client(token).post("/api/v1/agent/status",
                                      {"deployments": [{**REPORT, "id": made["id"]}]},
                                      format="json")
    assert reply.status_code == 403
    assert Deployment.objects.get(pk=made["id"]).state == "unknown"


def test_a_malformed_report_is_refused_naming_the_field(staff, gpu_host):
    made = staff.post("/api/v1/deployments/", llama(gpu_host.host), format="json").json()
    reply = gpu_host.agent.post("/api/v1/agent/status",
                                {"deployments": [{**REPORT, "id": made["id"],
                                                  "state": "exploded"}]}, format="json")
    assert reply.status_code == 400 and "state" in str(reply.json())
    assert Deployment.objects.get(pk=made["id"]).state == "unknown"


def test_a_report_of_a_deleted_deployment_is_skipped(gpu_host):
    reply = gpu_host.agent.post("/api/v1/agent/status",
                                {"deployments": [{**REPORT, "id": 999999}]}, format="json")
    assert reply.status_code == 200 and reply.json() == {"stored": 0}


@pytest.mark.parametrize(("field", "value"), [
    ("since", 1e20), ("since", -1e20), ("since", 1e300), ("next_start_at", 1e20),
    ("pid", 2**40), ("restarts", 2**40), ("exit_code", 2**40), ("exit_code", -2**40),
    ("revision", 2**40), ("id", 2**70),
])
def test_an_out_of_range_number_is_refused_naming_the_field(staff, gpu_host, field, value):
    made = staff.post("/api/v1/deployments/", llama(gpu_host.host), format="json").json()
    report = {**REPORT, "id": made["id"], field: value}
    reply = gpu_host.agent.post("/api/v1/agent/status", {"deployments": [report]},
                                format="json")
    assert reply.status_code == 400 and field in str(reply.json())
    assert Deployment.objects.get(pk=made["id"]).state == "unknown"


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_timestamp_that_is_not_a_number_is_refused(staff, gpu_host, value):
    made = staff.post("/api/v1/deployments/", llama(gpu_host.host), format="json").json()
    body = f'{{"deployments": [{{"id": {made["id"]}, "state": "ready", "since": {value}}}]}}'
    reply = gpu_host.agent.post("/api/v1/agent/status", body,
                                content_type="application/json")
    assert reply.status_code == 400
