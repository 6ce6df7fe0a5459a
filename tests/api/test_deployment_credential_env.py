"""Variables that decide where a deployment's credentials go (HF_ENDPOINT, proxies, CA
bundles ...) are set or changed only by holders of fleet.deploy_code: otherwise a writer could
send the HF_TOKEN someone else stored to a server of their choosing. Removing one is open."""

from __future__ import annotations

import pytest

from controlplane.fleet.env_routes import routes_credentials
from controlplane.fleet.models import Deployment, DeploymentRevision
from tests.api import deploying
from tests.api.deploying import llama

writer, code_writer = deploying.writer, deploying.code_writer

URL = "/api/v1/deployments/"
SECRET = "hf_the-owners-token"
ROUTES = ["HF_ENDPOINT", "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "REQUESTS_CA_BUNDLE",
          "CURL_CA_BUNDLE", "SSL_CERT_FILE", "HF_INFERENCE_ENDPOINT", "AWS_ENDPOINT_URL",
          "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "MODELSCOPE_DOMAIN", "PYTHONHTTPSVERIFY"]


@pytest.fixture
def with_token(code_writer, gpu_host) -> str:
    """A deployment whose HF_TOKEN a deploy_code holder stored; its detail URL."""
    made = code_writer.post(URL, llama(gpu_host.host, env={"HF_TOKEN": SECRET}), format="json")
    assert made.status_code == 201, made.json()
    return f"{URL}{made.json()['id']}/"


def stored_env() -> dict:
    return Deployment.objects.get().env


@pytest.mark.parametrize("name", ROUTES)
def test_a_writer_without_deploy_code_cannot_point_the_token_elsewhere(writer, with_token, name):
    revisions = DeploymentRevision.objects.count()
    reply = writer.patch(with_token, {"env": {"HF_TOKEN": "<redacted>",
                                              name: "https://attacker.example"}},
                         format="json")
    assert reply.status_code == 403, reply.json()
    [message] = reply.json()["env"]
    assert name in message and "fleet.deploy_code" in message
    assert stored_env() == {"HF_TOKEN": SECRET}
    assert DeploymentRevision.objects.count() == revisions


def test_nor_create_a_deployment_with_one(writer, gpu_host):
    body = llama(gpu_host.host, env={"HF_TOKEN": "hf_x", "HF_ENDPOINT": "https://a.example"})
    reply = writer.post(URL, body, format="json")
    assert reply.status_code == 403 and "HF_ENDPOINT" in reply.json()["env"][0]
    assert not Deployment.objects.exists()


def test_nor_change_one_a_deploy_code_holder_set(writer, code_writer, with_token):
    mirror = {"HF_TOKEN": "<redacted>", "HF_ENDPOINT": "https://mirror.corp.example"}
    assert code_writer.patch(with_token, {"env": mirror}, format="json").status_code == 200
    moved = {**mirror, "HF_ENDPOINT": "https://attacker.example"}
    reply = writer.patch(with_token, {"env": moved}, format="json")
    assert reply.status_code == 403 and "HF_ENDPOINT" in reply.json()["env"][0]
    assert stored_env()["HF_ENDPOINT"] == "https://mirror.corp.example"
    # Other changes leave the variable as it is, and so are open to the same writer...
    kept = writer.patch(with_token, {"env": {**mirror, "VLLM_LOGGING_LEVEL": "DEBUG"}},
                        format="json")
    assert kept.status_code == 200, kept.json()
    # ...and so is going back to the library's default endpoint.
    dropped = writer.patch(with_token, {"env": {"HF_TOKEN": "<redacted>"}}, format="json")
    assert dropped.status_code == 200 and stored_env() == {"HF_TOKEN": SECRET}


def test_a_deploy_code_holder_sets_them(code_writer, with_token):
    env = {"HF_TOKEN": "<redacted>", "HF_ENDPOINT": "https://mirror.corp.example",
           "HTTPS_PROXY": "http://proxy.corp.example:3128"}
    reply = code_writer.patch(with_token, {"env": env}, format="json")
    assert reply.status_code == 200, reply.json()
    assert stored_env() == {**env, "HF_TOKEN": SECRET}


@pytest.mark.parametrize("name", ["FOO_ENDPOINT", "S3_ENDPOINT_URL", "WANDB_BASE_URL",
                                  "NEW_SDK_PROXY", "X_CA_BUNDLE", "OTEL_EXPORTER_OTLP_CERTIFICATE"])
def test_names_are_matched_by_shape_too(name):
    assert routes_credentials(name)


@pytest.mark.parametrize("name", ["HF_TOKEN", "VLLM_LOGGING_LEVEL", "HF_HOME", "TMPDIR",
                                  "VLLM_HOST_IP", "OMP_NUM_THREADS"])
def test_ordinary_variables_are_not_routes(name):
    assert not routes_credentials(name)
