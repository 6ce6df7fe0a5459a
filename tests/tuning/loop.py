"""What the end-to-end tuning loops share (tests/e2e/test_tuning_loop.py on the simulated vLLM,
tests/real_vllm/test_tuning_loop_real.py on the real one): minute-long windows, a staff API
client, an agent token in a file, and a tuning pass over freshly built rollups."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from controlplane.telemetry.rollups import refresh as build
from controlplane.tuning import service
from tests.support.roles import user_with_role

WINDOW_S = 60  # production: 10 minutes
SHORT_WINDOWS = {"TUNING_WINDOW_S": WINDOW_S, "TUNING_VERIFY_WINDOW_S": WINDOW_S,
                 "TUNING_SETTLE_S": 0, "ROLLUP_SETTLE_S": 2, "ROLLUP_INTERVAL_S": 1}


def short_windows(settings) -> None:
    settings.PITWALL = {**settings.PITWALL, **SHORT_WINDOWS}


def staff_api() -> APIClient:
    """A deployer's API client (the deployer made once per database: a benchmark runs several
    stacks on one)."""
    if not get_user_model().objects.filter(username="lead").exists():
        user_with_role("lead", "deployer")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_api_token('lead')}")
    return api


def agent_token_file(directory: Path, hostname: str) -> Path:
    path = directory / "token"
    path.write_text(issue_agent_token(hostname)[0])
    return path


def rolled_up_pass():
    build.catch_up()
    return service.tuning_pass()


def rolled_up_follow_up() -> dict:
    build.catch_up()
    return service.follow_up()
