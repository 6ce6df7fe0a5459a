"""Each diagnosis on telemetry the simulated vLLM produced: a scenario (agents/sim/scenario.py)
runs a host and its deployment at accelerated time through the agent's own collectors, the
batches go through the real ingest, the real rollup builder rolls them up, and a tuning pass
finds what the scenario shows: its own diagnosis and no other; the healthy baseline none."""

from __future__ import annotations

import time

import pytest

from agents.sim.scenario import Scenario, simulate
from agents.sim.scenario_presets import preset
from controlplane.fleet.models import Host
from controlplane.fleet.tokens import issue_agent_token
from controlplane.tuning import service
from controlplane.tuning.models import Suggestion
from tests.tuning.telemetry import declare, roll_up

# Real processes or minutes of work: `make test` runs them, `make test-fast` leaves them
# out; seconds: about what each test takes (slow tests start first, the longest first).
pytestmark = pytest.mark.slow(seconds=6)

MINUTES = 12  # the 10-minute window and the minutes the rollups have not settled
INTERVAL_S = 5.0  # a sample every 5 s: the same rollups at a fifth of the simulation's cost

EXPECTED = {
    "healthy": set(),
    "kv_pressure": {"kv_pressure"},
    "concurrency_cap": {"concurrency_cap"},
    "capped_clients": {"concurrency_cap"},
    "prefill_starved_ttft": {"prefill_ttft"},
    "prefill_interference_itl": {"prefill_itl"},
    "cpu_starved": {"cpu_starvation"},
    "numa_mismatch": {"numa_mismatch"},
    "foreign_gpu_memory": {"foreign_memory"},
    "small_host": {"host_readiness"},
    "idle": {"over_provisioned"},
}


def stream(ingest, scenario: Scenario) -> Host:
    token, host = issue_agent_token(scenario.host.hostname)
    for batch in simulate(scenario, MINUTES, time.time() - 1, INTERVAL_S):
        code, reply = ingest.post(batch, token)
        assert code == 200 and not reply["ignored"], reply
    roll_up()
    return host


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_tuning_pass_finds_what_each_scenario_shows(name, ingest, settings):
    # Over-provisioning reads an hour; the idle scenario simulates the last ten minutes of it.
    settings.PITWALL = {**settings.PITWALL, "TUNING_IDLE_WINDOW_S": 600}
    scenario = preset(name)
    host = stream(ingest, scenario)
    declare(host, scenario)
    service.tuning_pass()
    found = {s.kind: s for s in Suggestion.objects.all()}
    assert set(found) == EXPECTED[name], {k: s.reasoning for k, s in found.items()}
    for s in found.values():
        assert s.evidence and s.reasoning and s.expected and 0 < s.confidence <= 1
