"""`PITWALL_REAL_VLLM=1 make run`: one more host whose agent runs a real vLLM service.

The host is this machine under its own hostname. Its agent runs with ``--supervise`` and the
real ``vllm serve`` of the environment `make real-vllm` installed (``PITWALL_VLLM_VENV``), and
with ``--router``: it serves the tiny model made there (``PITWALL_TINY_MODEL``) as a service of
two replicas behind vLLM's router, so the dashboard shows real engines beside the simulated
fleet, and a change to the service rolls through them while the load goes on. The GPU
collector is the real NVML one where the NVIDIA driver is installed; elsewhere the agent runs
with ``--gpu-backend none``, the host shows no GPUs (true), and the replicas run vLLM's CPU
build with ``gpu_indices: []``. vLLM's own ``vllm bench serve`` keeps the router busy.
"""

from __future__ import annotations

import ctypes.util
import os
import shlex
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agents.children import Child, python
from controlplane.fleet import services
from controlplane.fleet.models import Host, Service

VLLM_VERSION = "0.32.0"  # what tests/real_vllm/install.sh installs
SERVED_NAME = "pitwall-tiny-llama"
SERVICE_NAME = "tiny-llama-real"
REPLICAS = 2
# The replicas' ports, placed by Pitwall: the router takes the demo's port, below them.
REPLICA_PORTS = 20
# The tiny model's engine: no CUDA graphs on a CPU, float32 (the CPU backend's fast path), a
# context its positions cover, KV-cache blocks in multiples of 32 (the CPU backend's rule).
ARGS = {"enforce_eager": True, "dtype": "float32", "max_model_len": 512, "block_size": 32,
        "served_model_name": SERVED_NAME}
ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "VLLM_CPU_KVCACHE_SPACE": "1",
       # The simulated fleet and the control plane share these cores: no OpenMP pinning.
       "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_NO_USAGE_STATS": "1"}
# Requests per second, prompt and output tokens of the load generator: a steady, light load.
LOAD = {"rate": "3", "input": "64", "output": "128", "prompts": "180"}


class NotInstalled(Exception):
    pass


@dataclass(frozen=True)
class RealVllmDemo:
    venv: Path
    model: Path
    port: int
    workdir: Path
    hostname: str
    gpu_backend: str  # nvml where the NVIDIA driver is installed, none elsewhere

    @classmethod
    def from_env(cls, var: Path) -> RealVllmDemo:
        venv, model = os.environ.get("PITWALL_VLLM_VENV"), os.environ.get("PITWALL_TINY_MODEL")
        if not venv or not model or not Path(venv, "bin", "vllm").exists() \
                or not Path(model, "config.json").exists():
            raise NotInstalled("PITWALL_REAL_VLLM=1 needs the real vLLM and the tiny model: "
                               "`make real-vllm` installs them (PITWALL_REAL_VLLM=1 make run "
                               "does so first)")
        return cls(Path(venv), Path(model), int(os.environ.get("PITWALL_REAL_VLLM_PORT", 18400)),
                   var / "real-vllm", socket.gethostname(),
                   "nvml" if ctypes.util.find_library("nvidia-ml") else "none")

    def agent(self, url: str, token_file: Path) -> Child:
        vllm = shlex.join([str(self.venv / "bin" / "vllm"), "serve"])
        return Child("real-vllm-agent", [
            python(), "-m", "agents", "run", "--server", url, "--token-file", str(token_file),
            "--hostname", self.hostname, "--gpu-backend", self.gpu_backend,
            "--supervise", "--vllm-command", vllm, "--router",
            "--port-range", f"{self.port + 1}-{self.port + REPLICA_PORTS}",
            "--interval", "1", "--spool-dir", str(self.workdir / "spool")])

    def load_generator(self) -> Child:
        """`vllm bench serve` in a loop (each run is finite); while the engine starts, it
        fails at once and waits. Its reports go to a log, not the terminal."""
        bench = shlex.join([
            str(self.venv / "bin" / "vllm"), "bench", "serve", "--backend", "vllm",
            "--base-url", f"http://127.0.0.1:{self.port}", "--model", SERVED_NAME,
            "--tokenizer", str(self.model), "--dataset-name", "random",
            "--random-input-len", LOAD["input"], "--random-output-len", LOAD["output"],
            "--num-prompts", LOAD["prompts"], "--request-rate", LOAD["rate"], "--ignore-eos"])
        log = shlex.quote(str(self.workdir / "load.log"))
        loop = f"while :; do {bench} >> {log} 2>&1 || sleep 5; done"
        return Child("real-vllm-load", ["bash", "-c", loop], env={"HF_HUB_OFFLINE": "1"})

    def ensure_service(self) -> bool:
        """The demo service, once the agent has reported its host; an existing one is left
        as the operator left it. False while the host has not reported yet."""
        host = Host.objects.filter(hostname=self.hostname).first()
        if host is None or "router" not in (host.inventory.get("roles") or []):
            return False
        if not Service.objects.filter(name=SERVICE_NAME).exists():
            scratch = self.workdir / "engine"
            # vLLM's ZMQ sockets go in TMPDIR and must fit a 107-character path: the checkout
            # may be deep, so they get a short directory of their own.
            sockets = Path(tempfile.gettempdir(), f"pitwall-vllm-{self.port}")
            env = {**ENV, "TMPDIR": str(sockets), "VLLM_CACHE_ROOT": str(scratch / "cache"),
                   "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor")}
            for path in (sockets, scratch / "cache", scratch / "inductor"):
                path.mkdir(parents=True, exist_ok=True)
            services.save(Service(
                name=SERVICE_NAME, model=str(self.model), vllm_version=VLLM_VERSION, args=ARGS,
                env=env, replicas=REPLICAS, selector={}, router_host=host,
                router_port=self.port, drain_timeout_s=30),
                reason="make run: the real vLLM demo service")
        return True

    def banner(self, url: str) -> str:
        return (f"  Real vLLM: host {self.hostname} runs vLLM {VLLM_VERSION} (CPU build): service "
                f"{SERVICE_NAME}, {REPLICAS} replicas of the tiny model behind vLLM's router on "
                f"port {self.port}, loaded by `vllm bench serve` ({LOAD['rate']} req/s): "
                f"{url}/services/")
