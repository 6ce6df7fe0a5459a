"""Each diagnosis the CPU build of vLLM can show, shown on a real vLLM: the scenarios of
scenarios.py on real engines (deployments, and an engine started by hand that an agent only
watches), each minute judged by the tuning pass as production would judge it. The pass must
find exactly the scenario's diagnosis, propose its change, and say why in the engine's own
figures; the run log shows the facts it read and what the engine's gauges did."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.test import override_settings

from controlplane.tuning import diagnoses
from tests.real_vllm.record_shapes import shape
from tests.real_vllm.scenarios import (
    EVERY,
    SCENARIOS,
    Outcome,
    Stack,
    expected_kinds,
    pitwall_settings,
    run,
    schedule,
)

# django_db: pytest-django makes the test database only for a session that asks for it. Each
# test reads what the module's fixture kept, none of it from the database.
pytestmark = [pytest.mark.real_vllm, pytest.mark.django_db(transaction=True)]
# Every scenario but KV pressure, which tests/real_vllm/test_tuning_loop_real.py shows on a
# real engine from finding to verified fix: one minute each, back to back.
SCHEDULE = schedule(*(slot for slot in EVERY if slot != ("kv_pressure",)))
NAMES = [s.name for slot in SCHEDULE for s in slot]
# Where a long TTFT comes from, the reasoning must say: how much of it was queueing.
QUEUEING = ("concurrency_cap", "prefill_ttft")


@pytest.fixture(scope="module")
def outcomes(scenario_db, vllm_install, tmp_path_factory):
    with override_settings(PITWALL=pitwall_settings(settings.PITWALL)):
        with Stack(vllm_install, tmp_path_factory.mktemp("scenarios"), SCHEDULE) as stack:
            found = run(stack, SCHEDULE)
        for name in NAMES:
            print(f"{explain(found[name])}\nqueue: {queue_reading(found[name])}\n"
                  f"shape: {shape(found[name])}")
        yield found


def explain(outcome: Outcome) -> str:
    facts = {k: v for k, v in vars(outcome.facts).items()
             if isinstance(v, int | float | dict | set) and k != "engine_config"}
    found = [(s.kind, s.changes, s.reasoning) for s in outcome.suggestions]
    return (f"\n== {outcome.scenario.name} ({outcome.start:%H:%M} UTC): load {outcome.load}\n"
            f"facts: {facts}\nfound: {found}")


def queue_reading(outcome: Outcome) -> object:
    """What the diagnoses read of the queue (where they read one)."""
    read = getattr(diagnoses, "queue_of", None)
    return read(outcome.facts) if read is not None else None


@pytest.mark.parametrize("name", NAMES)
def test_the_load_ran_without_a_failed_request(outcomes, name):
    load = outcomes[name].load
    assert set(load) <= {"completed"}, load
    assert bool(load) == bool(SCENARIOS[name].clients), load


@pytest.mark.parametrize("name", NAMES)
def test_the_tuning_pass_finds_exactly_the_scenarios_diagnosis(outcomes, name):
    outcome = outcomes[name]
    assert outcome.kinds == expected_kinds(outcome), explain(outcome)


@pytest.mark.parametrize("name", [n for n in NAMES if SCENARIOS[n].change])
def test_the_finding_proposes_the_scenarios_change(outcomes, name):
    outcome, change = outcomes[name], SCENARIOS[name].change
    [finding] = [s for s in outcome.suggestions if s.kind == SCENARIOS[name].expected]
    [proposal] = [c for c in finding.changes if c["field"] == change.field]
    assert (proposal["proposed"] - proposal["current"]) * change.direction > 0, finding.changes


@pytest.mark.parametrize("name", QUEUEING)
def test_the_reasoning_says_how_much_of_ttft_was_queueing(outcomes, name):
    [finding] = [s for s in outcomes[name].suggestions if s.kind == SCENARIOS[name].expected]
    assert "queue" in finding.reasoning.lower(), finding.reasoning
    assert re.search(r"\d+ ?%", finding.reasoning), finding.reasoning
