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
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
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
                 kv_gib: int = 1, port: int | None = None,
                 base_args: Sequence[str] = BASE_ARGS) -> None:
        """``base_args``: the flags before ``args``; () where ``args`` spell them all (a
        scenario's engine, whose flags are rendered from a deployment's arguments)."""
        self.install, self.workdir = found, workdir
        self.port = port or free_port()
        self.argv = [*found.command, str(found.model), "--host", "127.0.0.1",
                     "--port", str(self.port), *base_args, *args]
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


# -- closed-loop clients, and a host that starves an engine of CPU (scenarios.py) -------

# "hello world " is three tokens of the tiny model's tokenizer.
PHRASE, PHRASE_TOKENS = "hello world ", 3


@dataclass(frozen=True)
class Clients:
    """``count`` clients, each sending one completion after another: a prompt of about
    ``prompt_tokens`` tokens, ``max_tokens`` generated, ``pause_s`` between two requests."""

    count: int
    prompt_tokens: int
    max_tokens: int
    pause_s: float = 0.0


class Load:
    """Clients against one server, until halted. Every prompt starts with
    a nonce of its own: vLLM's prefix cache would serve a prompt it saw before from the cache
    (measured: a repeated 400-token prompt prefilled in a third of the time)."""

    def __init__(self, url: str, model: str, clients: tuple[Clients, ...]) -> None:
        self.url, self.model = url, model
        self.outcomes: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._nonce = uuid.uuid4().hex[:8]
        self._threads = [threading.Thread(target=self._client, args=(c, f"{g}.{i}"),
                                          daemon=True)
                         for g, c in enumerate(clients) for i in range(c.count)]

    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def halt(self) -> None:
        """No new requests; those in flight finish (join waits for them)."""
        self._halt.set()

    def join(self, timeout: float = 300) -> dict[str, int]:
        self.halt()
        for thread in self._threads:
            thread.join(timeout)
        return dict(self.outcomes)

    def _client(self, clients: Clients, name: str) -> None:
        n = 0
        while not self._halt.is_set():
            n += 1
            outcome = self._one(f"{self._nonce} {name} {n} "
                                + PHRASE * (clients.prompt_tokens // PHRASE_TOKENS),
                                clients.max_tokens)
            with self._lock:
                self.outcomes[outcome] += 1
            if clients.pause_s or outcome != "completed":
                self._halt.wait(clients.pause_s or 1.0)

    def _one(self, prompt: str, max_tokens: int) -> str:
        try:
            post_json(f"{self.url}/v1/completions",
                      {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                       "ignore_eos": True}, timeout=300)
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}"
        except OSError as exc:
            return type(exc).__name__
        return "completed"


SPIN = "import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"


@contextmanager
def starve_cpu(pids: list[int], cpu: int = 0, neighbours: int = 2) -> Iterator[None]:
    """The engine's processes bound to one CPU (``taskset -a -p``: every thread, since each
    has its own affinity) and busy neighbours bound to the same CPU: what a host whose vLLM
    shares its cores does to it. Two neighbours, because the kernel shares a CPU by thread and
    the engine has several runnable ones: beside one it kept half the CPU, and its latencies
    went over the objectives only in some minutes. Undone on exit."""
    everywhere = os.sched_getaffinity(0)
    spinning = [subprocess.Popen([sys.executable, "-c", SPIN.format(cpu=cpu)])
                for _ in range(neighbours)]
    _bind(pids, {cpu})
    try:
        yield
    finally:
        for neighbour in spinning:
            neighbour.kill()
            neighbour.wait()
        _bind(pids, everywhere)


def _bind(pids: list[int], cpus: set[int]) -> None:
    for pid in pids:
        with suppress(OSError):  # gone meanwhile
            for tid in os.listdir(f"/proc/{pid}/task"):
                with suppress(OSError):
                    os.sched_setaffinity(int(tid), cpus)
