"""The flags a vLLM server runs with, read from its command line, and its version, asked of
/version: the reader on real-looking command lines, and the collector's inventory entry
(pages, /version and command lines handed in; tests/agents/test_vllm_cmdline_process.py
runs the real processes)."""

from __future__ import annotations

import json

from agents.collectors.vllm import VllmCollector
from agents.collectors.vllm_cmdline import first_server, read_args, serve_flags
from agents.loop import Sampler, Sources
from tests.agents.vllm_samples import label_sets, sample_text

VENV = "/opt/vllm/bin"
SERVE = [f"{VENV}/python3", f"{VENV}/vllm", "serve", "Qwen/Qwen3-8B", "--host", "0.0.0.0",
         "--port", "8000", "--max-num-seqs", "64", "--max-num-batched-tokens", "4096",
         "--gpu-memory-utilization", "0.85", "--api-key", "sk-do-not-leak"]
BUDGET = {"max_num_seqs": 64, "max_num_batched_tokens": 4096, "gpu_memory_utilization": 0.85}
URL = "http://127.0.0.1:8000/metrics"
PAGE = "v1-synthetic-vllm-0.33.0.txt"


def test_vllm_serve_gives_its_catalog_flags_and_nothing_else():
    args = read_args(SERVE, "0.33.0")
    assert args == BUDGET
    assert "sk-do-not-leak" not in json.dumps(args)  # unknown flags' values are never kept


def test_the_api_server_module_forms_are_read_too():
    module = ["python3", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model", "m",
              "--max-num-seqs=128", "--enable-prefix-caching", "-tp", "2"]
    assert read_args(module, "0.33.0") == {"max_num_seqs": 128, "enable_prefix_caching": True,
                                           "tensor_parallel_size": 2}
    cli = ["python", "-m", "vllm.entrypoints.cli.main", "serve", "m", "--max-num-seqs", "8"]
    assert read_args(cli, "0.33.0") == {"max_num_seqs": 8}
    script = ["python", "/src/vllm/vllm/entrypoints/openai/api_server.py", "--block-size", "32"]
    assert read_args(script, None) == {"block_size": 32}


def test_unknown_flags_and_bad_values_are_skipped_and_the_rest_kept():
    argv = ["vllm", "serve", "m", "--frobnicate", "7", "--max-num-seqs", "many",
            "--no-such-switch", "--gpu-memory-utilization", "0.9",
            "--max-num-batched-tokens", "8k"]
    assert read_args(argv, "0.33.0") == {"gpu_memory_utilization": 0.9,
                                         "max_num_batched_tokens": 8000}


def test_flags_are_read_as_the_servers_version_spells_them():
    argv = ["vllm", "serve", "m", "--swap-space", "4", "--max-num-seqs", "16"]
    assert read_args(argv, "0.10.2") == {"swap_space": 4.0, "max_num_seqs": 16}
    # removed in 0.18: a 0.33 server's argparse would have refused it; not a flag in effect
    assert read_args(argv, "0.33.0") == {"max_num_seqs": 16}
    # a version the catalog cannot place, or none: read as the default version
    assert read_args(argv, "nightly") == read_args(argv, None) == {"max_num_seqs": 16}


def test_a_process_that_is_not_a_vllm_server_gives_nothing():
    for argv in (["nginx", "-g", "daemon off;"], ["python3", "-m", "http.server", "8000"],
                 ["vllm", "bench", "serve", "--max-num-seqs", "8"], ["VLLM::APIServer_0"],
                 ["python", "-m", "vllm.entrypoints.cli.main", "bench"],
                 ["python", "-m", "agents.sim", "fleet", "--hosts", "2"], []):
        assert serve_flags(argv) is None and read_args(argv, "0.33.0") is None, argv


def test_with_several_api_servers_the_parents_command_line_is_the_one_read():
    commands = {41: ["VLLM::APIServer_0"], 40: SERVE, 42: ["VLLM::APIServer_1"]}
    assert first_server(commands) == (40, SERVE)
    assert first_server({41: ["VLLM::APIServer_0"]}) is None


# -- the collector ---------------------------------------------------------------------------


class Server:
    """/metrics and /version of one server; /version answers `version`, or fails if None."""

    def __init__(self, version: str | None = "0.33.0") -> None:
        self.version = version
        self.asked: list[str] = []

    def metrics(self, url: str, timeout: float) -> str:
        return sample_text(PAGE)

    def api(self, url: str, timeout: float) -> str:
        self.asked.append(url.split("8000/", 1)[1])
        if url.endswith("/v1/models"):
            return json.dumps({"data": [{"id": "m", "owned_by": "vllm"}]})
        if self.version is None:
            raise ConnectionRefusedError("refused")
        return json.dumps({"version": self.version})


def collector(server: Server) -> VllmCollector:
    return VllmCollector(URL, fetch=server.metrics, models_fetch=server.api,
                         version_fetch=server.api, clock=iter(range(100, 200)).__next__)


def test_the_inventory_entry_carries_the_flags_and_version_beside_cache_config_info():
    server = Server()
    vllm = collector(server)
    vllm.collect()
    vllm.note_commands({7: SERVE})
    [entry] = vllm.inventory()
    [labels] = label_sets(sample_text(PAGE), "vllm:cache_config_info")
    labels.pop("engine")
    assert entry["config"] == {**labels, "args": BUDGET, "vllm_version": "0.33.0"}
    for _ in range(3):
        vllm.collect()
        vllm.note_commands({7: SERVE})
    assert vllm.inventory() == [entry]  # nothing flaps between intervals
    assert server.asked == ["v1/models", "version"]  # each asked once


def test_no_version_and_no_command_line_leave_both_out():
    vllm = collector(Server(version=None))
    vllm.collect()
    vllm.note_commands({7: ["nginx"]})
    [entry] = vllm.inventory()
    assert "args" not in entry["config"] and "vllm_version" not in entry["config"]
    assert entry["config"]["block_size"]  # cache_config_info as before


def test_a_restarted_server_is_asked_its_version_again_and_its_new_flags_read():
    server = Server()
    vllm = collector(server)
    vllm.collect()
    vllm.note_commands({7: SERVE})
    server.version = "0.34.0"
    restarted = [*SERVE, "--max-num-seqs", "32"]  # the last one counts, as in argparse
    vllm.note_commands({9: restarted})
    # until the new process has answered a scrape, the old version stands: no extra resend
    assert vllm.inventory()[0]["config"]["vllm_version"] == "0.33.0"
    vllm.collect()
    config = vllm.inventory()[0]["config"]
    assert config["vllm_version"] == "0.34.0"
    assert config["args"] == {**BUDGET, "max_num_seqs": 32}
    assert server.asked == ["v1/models", "version", "version"]


def test_a_collector_whose_pages_are_faked_does_not_ask_a_real_version():
    vllm = VllmCollector(URL, fetch=Server().metrics, models_fetch=Server().api)
    vllm.collect()
    assert vllm.version is None and "vllm_version" not in vllm.inventory()[0]["config"]


# -- the loop hands the command lines over -----------------------------------------------------


class Processes:
    """A process collector: one listener on the engine's port, its command line counted."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.asked = 0

    def find_engine_pids(self, port: int) -> list[int]:
        return [7, 8]

    def listener_commands(self, port: int) -> dict[int, list[str]]:
        self.asked += 1
        return {7: self.argv}

    def collect(self, engine_pids, gpu_mem):
        return []


class Broken(Processes):
    def listener_commands(self, port: int) -> dict[int, list[str]]:
        raise RuntimeError("psutil bug")


def test_the_sampler_gives_each_engine_its_listeners_command_line():
    vllm = collector(Server())
    sampler = Sampler(Sources(engines=[vllm], processes=Processes(SERVE)), warn=lambda m: None)
    sampler.sample()
    [entry] = sampler.inventory()["engines"]
    assert entry["config"]["args"] == BUDGET and entry["config"]["vllm_version"] == "0.33.0"


def test_a_failing_command_line_read_costs_the_flags_only():
    warnings: list[str] = []
    vllm = collector(Server())
    sampler = Sampler(Sources(engines=[vllm], processes=Broken(SERVE)), warn=warnings.append)
    sample = sampler.sample()
    assert sample["engines"][0]["up"] == 1
    [entry] = sampler.inventory()["engines"]
    assert "args" not in entry["config"] and entry["config"]["vllm_version"] == "0.33.0"
    assert any("process commands" in w and "psutil bug" in w for w in warnings)
