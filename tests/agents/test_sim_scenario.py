"""Scenarios: a simulated deployment's agent batches, valid protocol v1, each preset showing
its diagnosis's symptom in the numbers the diagnoses read, and the healthy one none."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from agents.protocol import PROTOCOL_VERSION
from agents.sim.engine_model import GIB
from agents.sim.scenario import ENGINE_PID, Perturbations, Scenario, simulate
from agents.sim.scenario_cli import main
from agents.sim.scenario_presets import PRESETS, summary
from controlplane.telemetry.ingest.validate import parse_request

END = float(int(time.time()))
MINUTES = 4
# Four minutes of every preset simulated once per module: about 25 s of CPU (six took 36).
pytestmark = pytest.mark.slow(seconds=30)


@pytest.fixture(scope="module")
def runs() -> dict[str, list[dict[str, Any]]]:
    return {name: simulate(scenario, MINUTES, END) for name, scenario in PRESETS.items()}


def figures(runs: dict, name: str) -> dict[str, Any]:
    return summary(runs[name])


def inventory(batches: list[dict[str, Any]]) -> dict[str, Any]:
    return batches[0]["host"]


def engine_gpus(batches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    inv = inventory(batches)
    uuids = inv["engines"][0]["gpu_uuids"]
    return [g for g in inv["gpus"] if g["uuid"] in uuids]


def foreign_bytes(batches: list[dict[str, Any]]) -> float:
    """The most GPU memory beyond vLLM's 90 % on the engine's GPUs (as the rule reads it)."""
    gpus = {g["uuid"]: g["mem_total_bytes"] for g in engine_gpus(batches)}
    used = [g["mem_used_bytes"] - 0.9 * gpus[g["uuid"]] for b in batches
            for s in b["samples"] for g in s["gpus"] if g["uuid"] in gpus]
    return sum(used) / len(used)


def process_nodes(batches: list[dict[str, Any]]) -> set[int]:
    return {n for b in batches for s in b["samples"] for p in s.get("processes", ())
            for n in p.get("numa_nodes", ())}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_presets_batches_are_valid_protocol_v1(runs, name):
    batches = runs[name]
    parsed = parse_request({"protocol": PROTOCOL_VERSION, "batches": batches})
    assert len(parsed.batches) == MINUTES * 60 and not parsed.ignored
    assert [b["agent"]["seq"] for b in batches] == list(range(1, MINUTES * 60 + 1))
    ts = [b["samples"][0]["ts"] for b in batches]
    assert ts[-1] == END and all(b - a == 1.0 for a, b in zip(ts, ts[1:], strict=False))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_everything_is_labelled_simulated_as_the_running_simulation_labels_it(runs, name):
    inv = inventory(runs[name])
    assert inv["simulated"] is True and all(g["simulated"] for g in inv["gpus"])
    assert [e["simulated"] for e in inv["engines"]] == [True]
    assert engine_gpus(runs[name])  # the engine is linked to its GPUs through NVML's pids


def test_the_healthy_preset_shows_none_of_the_symptoms(runs):
    f, batches = figures(runs, "healthy"), runs["healthy"]
    inv = inventory(batches)
    assert f["kv_usage"] < 0.9 and f["preemptions_per_s"] < 0.1
    assert f["running_max"] < 256 and f["waiting"] < 1
    assert f["ttft_p99"] <= 2.0 and f["itl_p99"] <= 0.1
    assert f["gpu_util"] >= 85 and f["throttled_pct"] is None
    assert foreign_bytes(batches) < GIB
    assert process_nodes(batches) == {g["numa_node"] for g in engine_gpus(batches)}
    assert inv["cpu_count"] >= 8 and inv["mem_total_bytes"] >= 64e9
    assert all(g["mem_total_bytes"] >= 24e9 for g in inv["gpus"])
    assert f["finished_per_s"] > 0.05 and f["kv_usage"] > 0


def test_kv_pressure_keeps_the_cache_full_and_preempts(runs):
    f = figures(runs, "kv_pressure")
    assert f["kv_usage"] >= 0.9 and f["preemptions_per_s"] >= 0.1


def test_the_concurrency_cap_queues_requests_while_kv_has_room(runs):
    f = figures(runs, "concurrency_cap")
    assert f["running_max"] == 16 and f["running"] > 15 and f["waiting"] > 10
    assert f["kv_usage"] < 0.5


def test_capped_clients_reach_the_cap_every_minute_and_their_queue_empties_within_it(runs):
    f, batches = figures(runs, "capped_clients"), runs["capped_clients"]
    assert f["running_max"] == 16 and 12 < f["running"] < 16 and f["waiting"] > 0.5
    assert f["kv_usage"] < 0.5
    engines = [e for b in batches for s in b["samples"] for e in s["engines"]]
    minutes = [engines[i:i + 60] for i in range(0, len(engines), 60)]
    assert all(max(e["requests_running"] for e in m) == 16 for m in minutes)
    assert all(min(e["requests_waiting"] for e in m) == 0 for m in minutes)


def test_a_small_token_budget_starves_prefill_high_ttft_with_fine_itl(runs):
    f = figures(runs, "prefill_starved_ttft")
    assert f["ttft_p99"] > 2.0 and f["itl_p99"] <= 0.05


def test_a_huge_token_budget_lets_prefill_chunks_raise_itl(runs):
    f = figures(runs, "prefill_interference_itl")
    assert f["itl_p99"] > 0.1
    assert figures(runs, "prefill_starved_ttft")["itl_p99"] < f["itl_p99"]


def test_a_cpu_starved_instance_idles_its_gpu_under_a_throttled_quota(runs):
    f = figures(runs, "cpu_starved")
    assert f["gpu_util"] < 85 and f["throttled_pct"] >= 10 and f["running"] >= 1


def test_the_engine_core_and_each_api_server_report_their_modeled_cpu(runs):
    procs = runs["healthy"][-1]["samples"][0]["processes"]
    core = next(p for p in procs if p["pid"] == ENGINE_PID)
    api = [p for p in procs if p["pid"] >= 2**30]
    assert core["cpu_pct"] > 50 and "gpu_mem_bytes" in core and len(api) == 1
    assert 0 < api[0]["cpu_pct"] < 50


def test_a_numa_mismatch_puts_the_processes_on_another_node_than_the_gpu(runs):
    batches = runs["numa_mismatch"]
    assert process_nodes(batches) == {1}
    assert {g["numa_node"] for g in engine_gpus(batches)} == {0}


def test_a_foreign_process_holds_memory_beyond_vllms_share(runs):
    assert foreign_bytes(runs["foreign_gpu_memory"]) > 5 * GIB


def test_too_much_foreign_memory_stops_vllm_at_startup_as_it_would():
    scenario = Scenario(perturb=Perturbations(foreign_gpu_bytes={0: 20 * GIB}))
    with pytest.raises(ValueError, match="less than desired GPU memory utilization"):
        simulate(scenario, 1, END)


def test_the_small_host_is_below_the_reference_host(runs):
    inv = inventory(runs["small_host"])
    assert inv["cpu_count"] < 8 and inv["mem_total_bytes"] < 64e9
    assert all(g["mem_total_bytes"] < 24e9 for g in inv["gpus"])


def test_an_idle_deployment_finishes_almost_nothing_with_an_empty_cache(runs):
    f = figures(runs, "idle")
    assert f["finished_per_s"] < 0.05 and f["kv_usage"] < 0.1 and f["gpu_util"] < 20


def test_the_same_inputs_give_the_same_batches():
    one, two = simulate(PRESETS["healthy"], 1, END), simulate(PRESETS["healthy"], 1, END)
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)


def test_the_command_line_prints_one_batch_a_line(capsys):
    assert main(["idle", "--minutes", "0.5", "--end", str(END), "--interval", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and json.loads(lines[-1])["samples"][0]["ts"] == END
