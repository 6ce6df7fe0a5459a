"""Each diagnosis on facts built by hand: the healthy baseline trips none; each symptom trips
its own diagnosis with the change, the evidence and the reasoning an operator would check."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controlplane.tuning.diagnoses import diagnose, over_provisioned
from tests.tuning.factories import GIB, H200, deployment, gpus, healthy, host, minutes

pytestmark = pytest.mark.django_db


def only(facts):
    found = diagnose(facts)
    assert len(found) == 1, [f.kind for f in found]
    return found[0]


def test_a_healthy_deployment_gets_no_suggestion():
    assert diagnose(healthy()) == []


def test_too_little_data_is_not_judged():
    assert diagnose(healthy(minutes=3, kv_avg=0.99, preemptions_per_s=2.0)) == []


def test_kv_pressure_with_free_gpu_memory_raises_gpu_memory_utilization():
    base = healthy()
    [gpu] = base.gpus
    found = only(healthy(kv_avg=0.97, kv_max=1.0, preemptions_per_s=0.8, preempting_share=0.9,
                         gpu_mem_used={gpu.id: 0.78 * H200}))
    assert found.kind == "kv_pressure"
    assert found.changes == [{"field": "args.gpu_memory_utilization", "current": 0.9,
                              "proposed": 0.95}]
    assert {e["metric"] for e in found.evidence} >= {"engine.kv_cache_usage",
                                                     "engine.preemptions_per_s"}
    assert "97%" in found.reasoning and found.confidence > 0.8
    assert "queueing was 7% of TTFT" in found.reasoning


def test_kv_pressure_without_spare_memory_lowers_max_num_seqs():
    gpu = healthy().gpus[0]
    found = only(healthy(kv_avg=0.96, kv_max=1.0, preemptions_per_s=1.5, preempting_share=1.0,
                         running_avg=120, running_max=128,
                         gpu_mem_used={gpu.id: 0.955 * H200}, deployment=deployment(
                             healthy().host, args={"max_num_seqs": 128,
                                                   "gpu_memory_utilization": 0.95})))
    assert found.changes == [{"field": "args.max_num_seqs", "current": 128, "proposed": 96}]


@pytest.mark.parametrize("cap", ["num_gpu_blocks_override", "kv_cache_memory_bytes"])
def test_kv_pressure_under_the_operators_own_cap_raises_the_cap_first(cap):
    # Free GPU memory too: the cap overrides gpu_memory_utilization, so raising that would
    # change nothing.
    gpu = healthy().gpus[0]
    found = only(healthy(kv_avg=0.99, kv_max=1.0, preemptions_per_s=0.9, preempting_share=1.0,
                         running_avg=3.0, waiting_avg=9.0, gpu_mem_used={gpu.id: 0.5 * H200},
                         deployment=deployment(healthy().host, args={cap: 20})))
    assert found.kind == "kv_pressure"
    # 3 ran, 9 waited: demand x4, twice that for requests still growing, bounded to x4.
    assert found.changes == [{"field": f"args.{cap}", "current": 20, "proposed": 80}]
    assert f"{cap}=20" in found.reasoning
    assert "engine.requests_waiting" in {e["metric"] for e in found.evidence}


def test_a_raised_cap_at_least_doubles_and_at_most_quadruples():
    def proposed(running, waiting):
        facts = healthy(kv_avg=0.99, kv_max=1.0, preemptions_per_s=0.9, preempting_share=1.0,
                        running_avg=running, waiting_avg=waiting, deployment=deployment(
                            healthy().host, args={"num_gpu_blocks_override": 100}))
        return only(facts).changes[0]["proposed"]
    assert (proposed(10, 0), proposed(10, 5), proposed(2, 30)) == (200, 300, 400)


def thrashing(**changes):
    """A cache that thrashes, as a real vLLM under 3.5x its 20 blocks' demand: full at its
    peak, preempting 14 times a second in every minute, each preemption freeing blocks, so
    the average is only 0.77."""
    return healthy(**{"kv_avg": 0.77, "kv_max": 1.0, "preemptions_per_s": 14.3,
                      "preempting_share": 1.0, "running_avg": 3.9, "waiting_avg": 7.1,
                      "deployment": deployment(healthy().host,
                                               args={"num_gpu_blocks_override": 20}),
                      **changes})


def test_a_thrashing_cache_is_kv_pressure_though_its_average_is_low():
    found = only(thrashing())
    assert found.kind == "kv_pressure"
    assert found.changes[0]["field"] == "args.num_gpu_blocks_override"
    [full] = [e for e in found.evidence if e["metric"] == "engine.kv_cache_usage"]
    assert full["stat"] == "max" and "100% of the minutes" in full["threshold"]
    assert "peak 100%" in found.reasoning


@pytest.mark.parametrize("changes", [
    {"preempting_share": 0.3},  # a burst, in a minute or so of the window
    {"kv_max": 0.8},  # never full: preemptions come from elsewhere
    {"preemptions_per_s": 0.05},
])
def test_a_full_peak_without_lasting_preemptions_is_not_kv_pressure(changes):
    assert "kv_pressure" not in {f.kind for f in diagnose(thrashing(**changes))}


def capped(**changes):
    """Requests queue behind 128 running at the cap, the KV cache at 40 %: 14 waiting on
    average, time-weighted."""
    return healthy(**{
        "waiting_avg": 14, "running_avg": 128, "running_max": 128, "kv_avg": 0.35,
        "kv_max": 0.4, "engine_minutes": minutes(running_max=128, running_avg=128,
                                                 waiting_avg=14, kv_max=0.4, queue_s=14 * 60.0,
                                                 ttft_s=14 * 60.0 + 0.25 * 480), **changes})


def test_requests_queued_at_the_cap_with_kv_headroom_raise_max_num_seqs():
    found = only(capped())
    assert found.kind == "concurrency_cap"
    assert found.changes[0]["field"] == "args.max_num_seqs"
    assert found.changes[0]["current"] == 128 and found.changes[0]["proposed"] == 240
    # 14 waiting through the minute, over 480 requests: 1.75 s of a 2.0 s TTFT on average.
    assert "queueing was 88% of TTFT (1.75 s of 2.00 s" in found.reasoning, found.reasoning


def test_queued_but_below_the_cap_is_not_a_concurrency_cap():
    assert diagnose(healthy(waiting_avg=14, running_max=100, kv_max=0.4,
                            engine_minutes=minutes(running_max=100, waiting_avg=14,
                                                   kv_max=0.4))) == []


# What a real vLLM 0.32 reported under --max-num-seqs 4 with more clients than the cap, per
# minute: running at the cap at some instant of every minute but 1.2-3.8 on average, the
# queue 0.4-8.3 on average and empty at some instant of nearly every minute (its minimum 0),
# 140-570 s waited per minute, the KV cache at 12.6 % at most; TTFT p99 2.34 s.
REAL_CAPPED = [(1.2, 0.4, 140.0), (2.5, 3.1, 310.0), (3.8, 8.3, 570.0), (3.1, 5.0, 420.0),
               (2.2, 1.9, 200.0), (3.5, 6.4, 510.0), (2.9, 4.2, 380.0), (1.9, 0.9, 160.0),
               (3.3, 7.0, 530.0), (2.7, 2.8, 300.0)]


def real_capped():
    # ~13 requests a second (800 a minute) on the tiny model.
    rows = [replace(minutes(1)[0], running_max=4, running_avg=run, waiting_avg=wait,
                    waiting_max=12, kv_max=0.126, queue_s=queue, queue_n=800,
                    prefill_s=0.01 * 800, prefill_n=800, ttft_s=queue + 0.02 * 800,
                    ttft_n=800) for run, wait, queue in REAL_CAPPED]
    return healthy(engine_config={"max_num_seqs": "4", "max_num_batched_tokens": "4096"},
                   deployment=None, running_avg=2.7, running_max=4, waiting_avg=4.0,
                   kv_avg=0.06, kv_max=0.126, ttft_p99=2.34, itl_p99=0.02,
                   engine_minutes=rows)


def test_a_real_engines_capped_queue_is_a_concurrency_cap_and_not_prefill():
    """The case the minimum of the waiting gauge missed and prefill_ttft took: the queue
    empties inside most minutes, yet requests spend most of their TTFT in it, behind the
    cap."""
    found = only(real_capped())
    assert found.kind == "concurrency_cap", found.reasoning
    assert found.changes == [{"field": "args.max_num_seqs", "current": 4, "proposed": 8}]
    assert "queueing was 9" in found.reasoning and "prefill 2%" in found.reasoning


def test_a_cap_the_engine_does_not_report_is_read_from_where_running_stopped():
    # A watched engine whose command line the agent cannot read: vLLM's default would be
    # hundreds, but running stopped at 4 in every minute while requests waited.
    found = only(replace(real_capped(), engine_config={}))
    assert found.kind == "concurrency_cap"
    assert found.changes == [{"field": "args.max_num_seqs", "current": 4, "proposed": 8}]
    assert "not reported" in found.reasoning
    assert found.confidence < only(real_capped()).confidence


def test_a_deployments_unset_cap_is_vllms_default_not_where_running_stopped():
    # Pitwall wrote its command line: running stopping at 3 below the default is something
    # else (here the token budget, with the steps full).
    rows = minutes(running_max=3, running_avg=3, waiting_avg=2.5, kv_max=0.1,
                   queue_s=0.67 * 480, prefill_s=0.29 * 480, ttft_s=480.0,
                   step_tokens=256 * 1000, steps=1000)
    d = deployment(healthy().host, args={"max_num_batched_tokens": 256})
    found = only(healthy(deployment=d, engine_minutes=rows, ttft_p99=5.0, itl_p99=0.016,
                         running_max=3, kv_max=0.1))
    assert found.kind == "prefill_ttft", found.reasoning
    assert found.changes == [{"field": "args.max_num_batched_tokens", "current": 256,
                              "proposed": 512}]


def test_a_watched_engine_held_below_a_ceiling_by_a_full_budget_has_no_inferred_cap():
    rows = minutes(running_max=3, running_avg=3, waiting_avg=2.5, kv_max=0.1,
                   queue_s=0.67 * 480, prefill_s=0.29 * 480, ttft_s=480.0,
                   step_tokens=256 * 1000, steps=1000)
    found = only(healthy(deployment=None, engine_config={"max_num_batched_tokens": "256"},
                         engine_minutes=rows, ttft_p99=5.0, itl_p99=0.016, running_max=3,
                         kv_max=0.1))
    assert found.kind == "prefill_ttft"


def test_a_tiny_budget_is_raised_by_a_step_it_can_take():
    # 16 tokens (the real run that saw queueing behind the budget): 32, not 0 in steps of 64.
    d = deployment(healthy().host, args={"max_num_batched_tokens": 16})
    found = only(healthy(deployment=d, ttft_p99=3.5, itl_p99=0.02))
    assert found.changes == [{"field": "args.max_num_batched_tokens", "current": 16,
                              "proposed": 32}]


def test_a_window_that_caught_the_onset_of_a_capped_queue_names_no_prefill_knob():
    # Six calm minutes, then four at the cap with most of TTFT in the queue: too early for
    # concurrency_cap, and no reason to blame the prefill budget meanwhile.
    rows = minutes(6) + capped().engine_minutes[:4]
    assert diagnose(capped(engine_minutes=rows, ttft_p99=3.5, itl_p99=0.02)) == []


def test_a_queue_waiting_for_the_token_budget_raises_the_budget_surely():
    # Below the cap of 128, the KV cache with room, the steps at 8,100 of the 8,192-token
    # budget on average; 70 % of TTFT in the queue.
    found = only(healthy(ttft_p99=3.5, itl_p99=0.02, waiting_avg=6,
                         engine_minutes=minutes(waiting_avg=6, queue_s=0.7 * 480,
                                                prefill_s=0.25 * 480, ttft_s=1.0 * 480,
                                                step_tokens=8100 * 1000, steps=1000)))
    assert found.kind == "prefill_ttft"
    assert found.confidence == 0.7 and "wait for the budget" in found.reasoning
    assert "queueing was 70% of TTFT" in found.reasoning


def test_a_queue_whose_cause_is_unclear_says_so_with_less_confidence():
    # Queued below the cap, the KV cache with room, few steps full: not the budget either.
    found = only(healthy(ttft_p99=3.5, itl_p99=0.02, waiting_avg=6,
                         engine_minutes=minutes(waiting_avg=6, queue_s=0.7 * 480,
                                                prefill_s=0.25 * 480, ttft_s=1.0 * 480)))
    assert found.kind == "prefill_ttft"
    assert found.confidence <= 0.45 and "in doubt" in found.reasoning


def test_a_queue_that_touches_zero_every_minute_is_still_a_queue():
    # The gauge's sample average is low (bursts), but requests waited 6 s per second.
    found = only(capped(engine_minutes=minutes(running_max=128, running_avg=100,
                                               waiting_avg=0.6, kv_max=0.4,
                                               queue_s=6 * 60.0,
                                               ttft_s=6 * 60.0 + 0.25 * 480)))
    assert found.kind == "concurrency_cap"


def test_a_queue_for_kv_blocks_is_neither_the_cap_nor_the_budget():
    # Every queued minute with the KV cache full: admissions wait for blocks. KV pressure
    # proper needs preemptions; without them nothing here names a knob.
    assert diagnose(healthy(ttft_p99=3.5, itl_p99=0.02, waiting_avg=6, kv_max=0.7,
                            engine_minutes=minutes(waiting_avg=6, kv_max=0.95,
                                                   queue_s=0.7 * 480,
                                                   ttft_s=1.0 * 480))) == []


def test_high_ttft_with_fine_itl_raises_max_num_batched_tokens():
    found = only(healthy(ttft_p99=3.5, itl_p99=0.02))
    assert found.kind == "prefill_ttft"
    assert found.changes == [{"field": "args.max_num_batched_tokens", "current": 8192,
                              "proposed": 16384}]


def test_high_itl_with_prefills_lowers_max_num_batched_tokens():
    found = only(healthy(itl_p99=0.18, prompt_tps=20000))
    assert found.kind == "prefill_itl"
    assert found.changes == [{"field": "args.max_num_batched_tokens", "current": 8192,
                              "proposed": 4096}]


def test_the_engine_reports_its_flags_when_the_deployment_leaves_them_default():
    found = only(healthy(itl_p99=0.18, engine_config={"max_num_batched_tokens": "16384"}))
    assert found.changes[0]["current"] == 16384 and found.changes[0]["proposed"] == 8192


def test_a_process_pinned_at_a_core_while_the_gpu_idles_asks_for_cores_and_api_servers():
    found = only(healthy(proc_cpu={4242: 99.0}, gpu_util={healthy().gpus[0].id: 61.0},
                         waiting_avg=6))
    assert found.kind == "cpu_starvation"
    fields = {c["field"]: c for c in found.changes}
    assert fields["cpus"]["proposed"] == [0, 1, 2, 3]  # near GPU 0's NUMA node
    assert fields["args.api_server_count"] == {"field": "args.api_server_count",
                                               "current": 1, "proposed": 2}
    assert "99 %" in found.reasoning


def test_cgroup_throttling_counts_as_starvation():
    found = only(healthy(throttled_pct=35.0, gpu_util={healthy().gpus[0].id: 70.0},
                         ttft_p99=2.5))
    assert found.kind == "cpu_starvation"
    assert any(e["metric"] == "host.cpu_throttled_pct" for e in found.evidence)


def test_a_busy_gpu_is_not_starved_by_a_busy_core():
    assert diagnose(healthy(proc_cpu={4242: 99.0})) == []


def test_a_gpu_idle_for_want_of_requests_is_not_starved():
    # vLLM's engine loop polls a full core even at low load; nothing waits.
    assert diagnose(healthy(proc_cpu={4242: 99.0}, gpu_util={healthy().gpus[0].id: 12.0},
                            throttled_pct=40.0, waiting_avg=0.0, ttft_p99=0.3)) == []


def cpu_build(**changes):
    """vLLM's CPU build (no GPUs, no NVML) as a deployment bound to CPU 0."""
    d = deployment(host(), gpu_indices=[], cpus=[0])
    return healthy(**{"deployment": d, "gpus": [], "gpu_util": {}, "gpu_mem_used": {},
                      **changes})


def test_threads_waiting_for_a_cpu_starve_an_engine_even_without_gpu_figures():
    # Real vLLM 0.32 bound to one CPU beside busy neighbours: its EngineCore waited 100 % of
    # a thread's time while running 1 %, its worker 130 % while running 49 %; TTFT p99 2.5 s.
    found = only(cpu_build(proc_cpu={4242: 49.0, 4243: 1.0},
                           proc_cpu_wait={4242: 130.0, 4243: 100.0}, ttft_p99=2.5))
    assert found.kind == "cpu_starvation"
    assert found.changes[0] == {"field": "cpus", "current": [0], "proposed": [0, 1, 2, 3]}
    assert "waited for a CPU 99% of the time it could have run" in found.reasoning
    assert "No GPU utilisation was reported" in found.reasoning
    assert {e["metric"] for e in found.evidence} == {"proc.cpu_wait_pct"}


def test_a_cpu_builds_own_threads_contending_under_load_is_not_starvation():
    # The same engine unbound under a queue: its threads wait for each other (the CPU is its
    # device), 66-77 % of their runnable time.
    assert diagnose(cpu_build(proc_cpu={4242: 135.0, 4243: 30.0},
                              proc_cpu_wait={4242: 100.0, 4243: 70.0}, waiting_avg=7,
                              ttft_p99=2.5, itl_p99=0.08)) == []


def test_threads_waiting_for_a_cpu_while_nothing_waits_for_them_is_not_starvation():
    assert diagnose(healthy(proc_cpu_wait={4242: 70.0})) == []  # no queue, TTFT fine


def test_threads_waiting_for_a_cpu_beside_a_busy_gpu_is_not_starvation():
    assert diagnose(healthy(proc_cpu_wait={4242: 70.0}, waiting_avg=3, ttft_p99=0.8,
                            engine_minutes=minutes(waiting_avg=0.3))) == []


def test_decodes_slowed_by_a_throttled_cpu_are_starvation_not_prefill_interference():
    # No queue, TTFT fine, but every step waits for the CPU: ITL 350 ms.
    found = only(healthy(throttled_pct=85.0, gpu_util={healthy().gpus[0].id: 62.0},
                         itl_p99=0.35))
    assert found.kind == "cpu_starvation"


def test_recurring_preemptions_while_the_kv_cache_fills_are_not_prefill_interference():
    # KV at 45 % on average, filling up, with 0.4 preemptions/s: the recompute stretches the
    # steps before the average reads as pressure.
    assert diagnose(healthy(itl_p99=0.15, kv_avg=0.45, preemptions_per_s=0.4,
                            preempting_share=0.4)) == []


def test_processes_on_the_other_numa_node_are_bound_to_the_gpus_node():
    found = only(healthy(proc_cpus=set(range(16, 24))))
    assert found.kind == "numa_mismatch"
    assert found.changes == [{"field": "cpus", "current": None,
                              "proposed": list(range(8))}]


def test_memory_beyond_the_engines_share_is_foreign():
    gpu = healthy().gpus[0]
    found = only(healthy(gpu_mem_used={gpu.id: 0.9 * H200 + 10 * GIB}))
    assert found.kind == "foreign_memory"
    assert found.changes == [{"field": "args.gpu_memory_utilization", "current": 0.9,
                              "proposed": 0.87}]
    assert "10.0 GiB" in found.reasoning


def test_a_host_below_the_reference_gets_a_report_with_nothing_to_apply():
    small = host(hostname="small-node", cpu_count=4, mem_total_bytes=32 * 10**9)
    [gpu] = gpus(small, mem=16 * 10**9)
    d = deployment(small)
    found = only(healthy(deployment=d, host=small, gpus=[gpu], gpu_util={gpu.id: 93.0},
                         gpu_mem_used={gpu.id: 0.9 * 16 * 10**9}))
    assert found.kind == "host_readiness" and found.changes == []
    assert "4 CPU cores < 8" in found.reasoning and "32 GB RAM < 64 GB" in found.reasoning


def test_an_idle_hour_with_tensor_parallelism_halves_it():
    h = host()
    gpus(h, 2)
    d = deployment(h, gpu_indices=[0, 1], args={"tensor_parallel_size": 2})
    found = over_provisioned(healthy(deployment=d, minutes=60, finished_per_s=0.01,
                                     kv_max=0.02))
    assert found is not None and found.kind == "over_provisioned"
    assert found.changes == [
        {"field": "args.tensor_parallel_size", "current": 2, "proposed": 1},
        {"field": "gpu_indices", "current": [0, 1], "proposed": [0]}]


def test_a_busy_hour_is_not_over_provisioned():
    assert over_provisioned(healthy(minutes=60)) is None


@pytest.mark.parametrize(("name", "mem", "current"), [
    ("NVIDIA H200", H200, 8192), ("NVIDIA A100-SXM4-80GB", 80 * GIB, 2048),
    ("NVIDIA L4", 24 * GIB, 2048)])
def test_an_unset_budget_reads_vllms_default_for_the_gpu(name, mem, current):
    base = healthy(ttft_p99=3.5, itl_p99=0.02)
    gpu = base.gpus[0]
    gpu.name, gpu.mem_total_bytes = name, mem
    found = only(replace(base, gpu_mem_used={gpu.id: 0.9 * mem}))
    assert found.changes == [{"field": "args.max_num_batched_tokens", "current": current,
                              "proposed": 2 * current}]


# -- prefill starving TTFT, graded by the ITL headroom --------------------------------------


def test_itl_over_half_its_objective_still_leaves_room_for_a_bounded_raise():
    # 60 ms of a 100 ms objective: the old half-objective gate said nothing.
    found = only(healthy(ttft_p99=6.0, itl_p99=0.06))
    assert found.kind == "prefill_ttft"
    # Steps may grow until ITL p99 reaches 90 ms: x1.5, predicted 60 x 1.5 = 90 ms.
    assert found.changes == [{"field": "args.max_num_batched_tokens", "current": 8192,
                              "proposed": 12288}]
    assert "90 ms" in found.expected and "3.0x the 2 s objective" in found.reasoning
    assert found.confidence == pytest.approx(0.62)


def test_ample_itl_headroom_raises_at_most_twofold():
    found = only(healthy(ttft_p99=3.0, itl_p99=0.01))
    assert found.changes[0]["proposed"] == 16384 and found.confidence == 0.7


def test_itl_near_its_objective_leaves_no_room_and_stays_silent():
    # 80 ms: 90 ms allows x1.125, under the x1.25 a restart is worth.
    assert diagnose(healthy(ttft_p99=6.0, itl_p99=0.08)) == []


def test_the_raise_never_passes_the_largest_budget():
    found = only(healthy(ttft_p99=6.0, itl_p99=0.02,
                         engine_config={"max_num_batched_tokens": "49152"}))
    assert found.changes[0]["proposed"] == 65536
    assert diagnose(healthy(ttft_p99=6.0, itl_p99=0.02,
                            engine_config={"max_num_batched_tokens": "65536"})) == []


def test_a_healthy_ttft_is_silent_whatever_the_itl_headroom():
    assert diagnose(healthy(ttft_p99=1.5, itl_p99=0.005)) == []
