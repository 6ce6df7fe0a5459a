"""The simulated vLLM as a process beside the real one, for the comparisons."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.live import Process, free_port
from tests.support.polling import wait_until

MODEL = "pitwall-tiny-llama"


class SimVllm:
    def __init__(self, workdir: Path, *args: str) -> None:
        self.port = free_port()
        self.process = Process([sys.executable, "-m", "agents.sim.vllm_server", "--port",
                                str(self.port), "--model", MODEL, *args],
                               log=workdir / f"sim-{self.port}.log")
        wait_until(self._healthy, 60, self.process.output)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as reply:
            return reply.read().decode()

    def stop(self) -> int:
        return self.process.stop()


# Where the simulated vLLM's /metrics may differ from the real 0.32 CPU server's, and why; the
# test fails on any other difference and on an entry here that no longer differs.
ONLY_REAL = {
    "vllm:estimated_flops_per_gpu": "an MFU estimate; no catalog metric reads it",
    "vllm:estimated_read_bytes_per_gpu": "an MFU estimate; no catalog metric reads it",
    "vllm:estimated_write_bytes_per_gpu": "an MFU estimate; no catalog metric reads it",
}
LABELS_ONLY_SIM = {
    "vllm:cache_config_info": ({"simple_cpu_offload_num_blocks"},
                               "the simulation describes 0.33, whose CacheConfig has it"),
}


def families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """Every vllm:* family: its type and the label names its samples carry (le aside)."""
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:") or family.name.endswith("_created"):
            continue  # _created: prometheus_client's counter start times, not families
        labels = frozenset(name for s in family.samples for name in s.labels) - {"le"}
        out[family.name] = (family.type, labels)
    return out


def assert_same_families(real: dict, simulated: dict) -> None:
    """The simulation prints the real server's families, types and labels but for the
    differences listed above (and each listed one still differs)."""
    assert sorted(real.keys() - simulated.keys()) == sorted(ONLY_REAL)
    assert sorted(simulated.keys() - real.keys()) == []
    for name in real.keys() & simulated.keys():
        (real_type, real_labels), (sim_type, sim_labels) = real[name], simulated[name]
        assert sim_type == real_type, name
        extra, _why = LABELS_ONLY_SIM.get(name, (set(), ""))
        assert (sim_labels - real_labels, real_labels - sim_labels) == (extra, set()), name
