"""Engines Pitwall does not run, on facts built by hand: every diagnosis applies, the changes
become a fragment to paste (flags, a numactl binding, CUDA_VISIBLE_DEVICES), and a value the
engine does not report is named as vLLM's default, assumed."""

from __future__ import annotations

import pytest

from agents.collectors.numa import format_cpulist
from controlplane.tuning.diagnoses import diagnose, over_provisioned
from controlplane.tuning.fragments import as_report, command
from tests.tuning.factories import gpus, healthy, host

pytestmark = pytest.mark.django_db


def foreign(**changes):
    """The healthy baseline, on a server Pitwall does not run."""
    return healthy(deployment=None, **changes)


def report(facts):
    found = diagnose(facts)
    assert len(found) == 1, [f.kind for f in found]
    return as_report(facts, found[0])


def test_a_healthy_foreign_engine_gets_nothing():
    assert diagnose(foreign()) == []


def test_a_reported_flag_becomes_the_fragment_with_its_confidence_intact():
    facts = foreign(itl_p99=0.18, engine_config={"max_num_batched_tokens": "16384",
                                                  "max_num_seqs": "None"})
    found = report(facts)
    assert found.kind == "prefill_itl" and found.command == "--max-num-batched-tokens 8192"
    assert found.confidence == 0.7 and "assumed" not in found.reasoning


def test_a_flag_the_engine_does_not_report_is_vllms_default_assumed():
    found = report(foreign(ttft_p99=6.0, itl_p99=0.06))
    assert found.command == "--max-num-batched-tokens 12288"
    assert "max_num_batched_tokens: vLLM's default on this GPU, assumed" in found.reasoning
    assert found.confidence == pytest.approx(0.62 * 0.8, abs=0.01)


def test_kv_pressure_under_the_engines_own_block_cap_raises_that_cap():
    found = report(foreign(kv_avg=0.97, preemptions_per_s=0.8, preempting_share=1.0,
                           waiting_avg=3, running_avg=60,
                           engine_config={"num_gpu_blocks_override": "2000",
                                          "gpu_memory_utilization": "0.9"}))
    assert found.kind == "kv_pressure"
    assert found.changes[0]["field"] == "args.num_gpu_blocks_override"
    assert found.command == f"--num-gpu-blocks-override {found.changes[0]['proposed']}"


def test_processes_on_the_other_numa_node_get_a_numactl_binding():
    found = report(foreign(proc_cpus=set(range(16, 24))))
    assert found.kind == "numa_mismatch"
    assert found.changes[0]["current"] == list(range(16, 24))  # narrower than the host
    assert found.command == "numactl --physcpubind=0-7 --membind=0 vllm serve …"


def test_a_starved_engine_gets_cores_near_its_gpu_and_one_more_api_server():
    gpu = healthy().gpus[0]
    found = report(foreign(proc_cpu={4242: 99.0}, gpu_util={gpu.id: 61.0}, waiting_avg=6))
    assert found.kind == "cpu_starvation"
    assert found.command == ("numactl --physcpubind=0-3 --membind=0 vllm serve … "
                             "--api-server-count 2")


def test_an_idle_foreign_engine_gives_half_its_gpus_back():
    h = host()
    two = gpus(h, 2)
    facts = foreign(gpus=two, minutes=60, finished_per_s=0.01, kv_max=0.02,
                    engine_config={"tensor_parallel_size": "2"})
    found = as_report(facts, over_provisioned(facts))
    assert found.command == "CUDA_VISIBLE_DEVICES=0 vllm serve … --tensor-parallel-size 1"


def test_a_report_with_nothing_to_change_has_no_fragment():
    facts = foreign()
    assert command(facts, []) == ""


def test_cpu_lists_are_written_as_ranges():
    assert format_cpulist([3, 1, 2, 7, 9, 10]) == "1-3,7,9-10"
