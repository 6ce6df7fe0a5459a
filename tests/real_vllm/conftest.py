"""Fixtures of the real-vLLM suite (`make test-real-vllm`)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from tests.real_vllm.engine import Install, RealVllm, install
from tests.real_vllm.service_stack import start_stack
from tests.support.samples import truncate_samples
from tests.tuning.loop import staff_api


@pytest.fixture(scope="session")
def vllm_install() -> Install:
    return install()


# Flags beyond engine.BASE_ARGS that the agent must read back from the server's command line
# (test_engine_serves.py); the other tests of the shared engine need none of their own.
ENGINE_FLAGS = ("--max-num-seqs", "8", "--max-num-batched-tokens", "1024")


@pytest.fixture(scope="module")
def real_vllm(vllm_install, tmp_path_factory):
    """One real engine shared by a module's tests that only read from it."""
    engine = RealVllm(vllm_install, tmp_path_factory.mktemp("vllm"), ENGINE_FLAGS)
    engine.wait_ready()
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def scenario_db(django_db_setup, django_db_blocker):
    """The test database, open to a whole module that runs scenarios (scenarios.py): a server
    and agents write it from processes of their own, so its rows are committed; emptied
    afterwards, as a transactional test's are."""
    with django_db_blocker.unblock():
        truncate_samples()
        try:
            yield
        finally:
            truncate_samples()
            call_command("flush", verbosity=0, interactive=False, reset_sequences=False)


@pytest.fixture
def service_stack(empty_samples, tmp_path, settings, vllm_install):
    """A service's stack on this host (service_stack.py): the staff API client, the agent and
    the controller. A stall is judged over 5 s and each replica of a rollout checked for 15 s
    (after its 15-s settle): the check's errors decide here (below), and a window that holds
    too few requests for a p99 (rollouts.MIN_REQUESTS a side) is extended by the check itself.

    The rollout's latency guard is wide (a p99 may read ten times the unchanged replica's):
    two CPU replicas sharing this machine's two cores with the control plane, the agent, the
    router and the clients read up to six times apart on a change of max_num_seqs (TTFT p99 0.73
    against 4.3 s, then ITL p99 0.36 against 1.42 s, over 30-s checks), which failed the
    default guard twice running in 3 of the last 8 runs, while two fresh engines side by side
    with nothing else running read equal (ITL p99 24.6 ms both). Here the check's errors
    decide; its latency judgement is tested on simulated engines (tests/fleet/test_rollouts.py).
    """
    settings.PITWALL = {**settings.PITWALL, "SERVICE_STALL_S": 5, "ROLLOUT_CHECK_S": 15,
                        "ROLLOUT_LATENCY_GUARD": 9.0}
    server, agent, controller = start_stack(tmp_path, str(vllm_install.vllm))
    yield staff_api(), agent, controller
    controller.stop()
    agent.stop(timeout=120)
    server.stop()
