"""A real vLLM (the CPU build) serving the tiny model, for tests and benchmarks.

`make real-vllm` installs vLLM into its own environment and makes the model; the Makefile
exports where: ``PITWALL_VLLM_VENV`` and ``PITWALL_TINY_MODEL``. Nothing here mocks vLLM: a
test that asks for an engine gets ``vllm serve`` as an operator would run it, with the
environment a clean run needs (offline hub, a KV-cache size, caches and sockets in the
instance's own directory).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.support.live import Process, free_port
from tests.support.polling import wait_until

VERSION = "0.32.0"
# Real model loads take 25-90 s on 2 busy cores; the deadline only turns a hang into a failure.
READY_TIMEOUT_S = 300
# The flags every tiny-model engine here needs: no CUDA graphs to capture on a CPU, float32 (the
# CPU backend's fast path), a context the tiny model's positions cover.
BASE_ARGS = ("--enforce-eager", "--dtype", "float32", "--max-model-len", "512")


class MissingInstall(AssertionError):
    pass


@dataclass(frozen=True)
class Install:
    venv: Path
    model: Path

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    @property
    def command(self) -> list[str]:
        """`vllm serve` from the real environment: what the supervisor's --vllm-command gets."""
        return [str(self.vllm), "serve"]


def install() -> Install:
    """Where `make real-vllm` put vLLM and the model; a clear failure when it has not run."""
    venv, model = os.environ.get("PITWALL_VLLM_VENV"), os.environ.get("PITWALL_TINY_MODEL")
    if not venv or not model:
        raise MissingInstall("PITWALL_VLLM_VENV / PITWALL_TINY_MODEL are not set: run these "
                             "tests with `make test-real-vllm`, which installs vLLM first")
    found = Install(Path(venv), Path(model))
    if not found.vllm.exists() or not (found.model / "config.json").exists():
        raise MissingInstall(f"no vLLM at {found.vllm} or no model at {found.model}: "
                             "run `make real-vllm`")
    return found


def engine_vars(workdir: Path, kv_gib: int = 1) -> dict[str, str]:
    """What one engine needs in its environment: offline, its KV-cache size, and its ZMQ
    sockets and compile caches in its own directory (two engines on one host must not share
    them). A deployment's ``env`` carries exactly these."""
    for sub in ("cache", "inductor"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    # vLLM's ZMQ socket paths (TMPDIR/<uuid>) must fit 107 characters: pytest's tmp_path may
    # not, so sockets get a short directory of their own.
    sockets = tempfile.mkdtemp(prefix="pv-", dir="/tmp")
    return {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "VLLM_CPU_KVCACHE_SPACE": str(kv_gib),
            # These machines are shared: do not pin OpenMP threads to cores others use.
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "TMPDIR": sockets, "VLLM_CACHE_ROOT": str(workdir / "cache"),
            "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor"),
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def engine_env(workdir: Path, kv_gib: int = 1) -> dict[str, str]:
    """The whole environment of an engine started here: ours plus `engine_vars`."""
    return {**os.environ, **engine_vars(workdir, kv_gib)}


class RealVllm:
    """One `vllm serve` of the tiny model on a free loopback port."""

    def __init__(self, found: Install, workdir: Path, args: Sequence[str] = (),
                 kv_gib: int = 1, port: int | None = None) -> None:
        self.install, self.workdir = found, workdir
        self.port = port or free_port()
        self.argv = [*found.command, str(found.model), "--host", "127.0.0.1",
                     "--port", str(self.port), *BASE_ARGS, *args]
        workdir.mkdir(parents=True, exist_ok=True)
        self.process = Process(self.argv, env=engine_env(workdir, kv_gib),
                               log=workdir / "vllm.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Seconds until /health answered 200 (fails with the log if it exits or hangs)."""
        start = time.monotonic()
        wait_until(lambda: self._healthy() or self._died(), timeout,
                   lambda: f"vLLM not healthy after {timeout} s:\n{self.log_tail()}", every=0.5)
        if self.process.proc.poll() is not None:
            raise AssertionError(f"vLLM exited with {self.process.proc.returncode}:\n"
                                 f"{self.log_tail()}")
        return time.monotonic() - start

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:
                return reply.status == 200
        except (OSError, ValueError):
            return False

    def _died(self) -> bool:
        return self.process.proc.poll() is not None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as reply:
            return reply.read().decode()

    def complete(self, prompt: str = "hello world", max_tokens: int = 16,
                 timeout: float = 120) -> dict:
        return post_json(f"{self.url}/v1/completions",
                         {"model": str(self.install.model), "prompt": prompt,
                          "max_tokens": max_tokens, "ignore_eos": True}, timeout)

    def load(self, requests: int, max_tokens: int, concurrency: int) -> list[int]:
        """Send `requests` completions, `concurrency` at a time: the HTTP status of each."""
        def one(i: int) -> int:
            try:
                self.complete(f"request {i} " + "token " * 8, max_tokens)
                return 200
            except urllib.error.HTTPError as exc:
                return exc.code
        with ThreadPoolExecutor(concurrency) as pool:
            return list(pool.map(one, range(requests)))

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.process.output().splitlines()[-lines:])

    def stop(self, timeout: float = 60) -> int:
        return self.process.stop(timeout)


@dataclass
class Stream:
    """How far a stream got: text chunks seen, and the tokens vLLM's usage chunk reported."""

    chunks: int = 0
    tokens: int = 0


def stream_tokens(url: str, model: str, prompt: str, max_tokens: int,
                  timeout: float = 300, progress: Stream | None = None) -> int:
    """A streaming completion: how many tokens it generated, from the usage vLLM sends last
    (a chunk may carry several tokens when the client reads slower than they come), else the
    chunks that carried text. vLLM ends a stream it aborts with [DONE] too, so only this count
    tells a cut stream from a whole one."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    request = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    got, usage = progress or Stream(), None
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        for raw in reply:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[len("data: "):])
            if chunk.get("usage"):
                usage = chunk["usage"]["completion_tokens"]
            if chunk.get("choices"):
                got.chunks += 1
    got.tokens = usage if usage is not None else got.chunks
    return got.tokens


def post_json(url: str, body: dict, timeout: float) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read())
