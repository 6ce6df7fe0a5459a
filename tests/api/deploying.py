"""What the deployment API tests share: a host with two GPUs and its agent's client."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from controlplane.fleet.models import Host
from tests.support.clients import bearer_client


@dataclass
class GpuHost:
    host: Host
    agent: APIClient  # its agent's token


def llama(host: Host, **changes) -> dict:
    """A valid create body: Llama 3.1 8B on GPU 0 with a few tuned arguments."""
    body = {"host": host.pk, "name": "llama-8b", "model": "meta-llama/Llama-3.1-8B-Instruct",
            "port": 8000, "gpu_indices": [0], "vllm_version": "0.11.0",
            "args": {"max_num_seqs": 128, "gpu_memory_utilization": 0.9,
                     "max_model_len": 8192, "enable_prefix_caching": True},
            "cpus": [0, 1, 2, 3], "env": {"VLLM_LOGGING_LEVEL": "INFO"},
            "reason": "first rollout"}
    return {**body, **changes}


DEPLOYMENT_PERMISSIONS = ("view_host", "view_deployment", "add_deployment",
                          "change_deployment", "delete_deployment")


def deployment_writer(username: str, *, deploy_code: bool) -> APIClient:
    """A client for a user who may change deployments, with or without fleet.deploy_code
    (staff too, for the control planes that still gate writes on is_staff)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    from controlplane.fleet.tokens import issue_api_token

    user = get_user_model().objects.create_user(username, is_staff=True)
    codenames = [*DEPLOYMENT_PERMISSIONS, *(["deploy_code"] if deploy_code else [])]
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="fleet",
                                                        codename__in=codenames))
    return bearer_client(issue_api_token(username, name="tests"))


@pytest.fixture
def writer(db) -> APIClient:
    """May change deployments, but not deploy code-loading arguments."""
    return deployment_writer("dana", deploy_code=False)


@pytest.fixture
def code_writer(db) -> APIClient:
    """Holds fleet.deploy_code as well."""
    return deployment_writer("cody", deploy_code=True)
