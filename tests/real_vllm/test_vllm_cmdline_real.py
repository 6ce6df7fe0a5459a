"""The real vLLM (the 0.32 CPU build, `make test-real-vllm`): its /version, and the flags the
agent reads from its API server's command line (vLLM renames its other processes; the
listener must keep its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.collectors.process import ProcessCollector
from agents.collectors.vllm import VllmCollector
from agents.loop import Sampler, Sources
from agents.vllm_args import parse_version
from tests.real_vllm.engine import VERSION, RealVllm, install

pytestmark = pytest.mark.real_vllm

FLAGS = ("--max-num-seqs", "8", "--max-num-batched-tokens", "1024")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[RealVllm]:
    engine = RealVllm(install(), tmp_path_factory.mktemp("vllm-cmdline"), args=FLAGS)
    engine.wait_ready()
    yield engine
    engine.stop()


def test_the_agent_reads_the_real_servers_version_and_flags(served):
    sampler = Sampler(Sources(engines=[VllmCollector(f"{served.url}/metrics", timeout=10)],
                              processes=ProcessCollector()), warn=lambda message: None)
    sampler.sample()
    [entry] = sampler.inventory()["engines"]
    config = entry["config"]
    # "0.32.0+cpu": the CPU build's local version, which the catalog reads as 0.32.0
    assert parse_version(config["vllm_version"])[:3] == parse_version(VERSION)[:3]
    # engine.BASE_ARGS (--enforce-eager --dtype float32 --max-model-len 512) and FLAGS; not
    # the model, --host or --port
    assert config["args"] == {"max_num_seqs": 8, "max_num_batched_tokens": 1024,
                              "enforce_eager": True, "dtype": "float32", "max_model_len": 512}
    assert int(config["block_size"]) > 0  # cache_config_info, as before
