"""A simulated ``vllm serve``: the OpenAI endpoints and /metrics of vLLM 0.33, no GPU needed.

    python -m agents.sim.vllm_server --port 8001 --model Qwen/Qwen3-8B --load 4

Each data-parallel rank is an EngineModel driven by real time: every scrape, completion and
/sim/state call first advances the engines to the clock, and a ticker thread does so between.
POST /v1/completions joins the simulated queue and answers when the engine has generated its
tokens. /metrics is exactly vLLM's; the simulation says what it is only on /v1/models
(``owned_by: pitwall-sim``) and on GET /sim/state, which the simulated GPUs read. GET /version
answers as vLLM's does, with the release it imitates (VLLM_VERSION).

It takes ``vllm serve``'s flags: those it models change the simulation, every other one is
accepted and named once on stderr as ignored, so the agent's supervisor can start it with the
argv it would give the real server. On SIGTERM it does what vLLM 0.32's API server does
(measured, and compared by tests/real_vllm/test_sim_sigterm_matches_real.py): with
``--shutdown-timeout N`` (N > 0) the running requests finish, for at most N seconds, while
/health still answers 200 and a new completion gets a 500 ("cannot schedule new futures after
shutdown"); with vLLM's default, 0, every running completion gets a 500 (the EngineCore's
"encountered an issue") at once. Then it exits 0. Real vLLM also cuts running streams short;
the simulation serves no streams.

A wedged engine loop (a real EngineCore that hangs stops stepping while its API server goes
on) is one POST away: ``POST /sim/stall`` freezes every engine of the server where it stands.
Running requests stay running and waiting ones wait; no token is generated and no request
finishes; a new completion is accepted and joins the queue, and its HTTP call hangs. /health
still answers 200 and /metrics serves the frozen gauges and counters: what the real API server
shows while its EngineCore is SIGSTOPped. ``POST /sim/resume`` lets the engines go on from
the moment of the resume (no step is run for the time they stood still; what arrived meanwhile
is queued at once), and the held requests finish. Both answer the requests the engines hold
(``{"stalled": true, "requests_running": 2, "requests_waiting": 0}``). They exist only on
the simulated server, under /sim/ beside /sim/state, take no input, and only ever freeze or
release this server's own engines: no vLLM has them.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import prometheus_client as prom

from agents.collectors.cgroup import CgroupThrottle
from agents.sim.batched_series import BatchedSeries
from agents.sim.cpu_model import CpuBudget, CpuModel
from agents.sim.engine_model import (
    ClientLoad,
    EngineConfig,
    EngineModel,
    Request,
    RequestSpec,
    SyntheticLoad,
)
from agents.sim.vllm_exposition import SpecDecode, VllmExposition
from agents.sim.workload import MIXES

# The engines advance on every scrape and completion anyway; the ticker only bounds how much
# simulated time one call may have to catch up on, and how late a completion is answered.
# The release whose /metrics this imitates (vllm_exposition.py); GET /version answers it.
VLLM_VERSION = "0.33.0"
TICK_IDLE_S = 0.25
TICK_BUSY_S = 0.02  # while an HTTP completion waits
_WORDS = ("the", "pit", "wall", "calls", "a", "stop", "on", "lap", "forty", "two")


@dataclass
class SimOptions:
    engine: EngineConfig = field(default_factory=EngineConfig)
    host: str = "127.0.0.1"
    port: int = 8000
    data_parallel_size: int = 1
    gpu_indices: list[int] | None = None  # None: 0 .. tp*dp-1
    load: float = 4.0  # requests/s, Poisson, unless ``clients`` is set
    seed: int | None = None
    startup_seconds: float = 0.0
    shutdown_timeout: float = 0.0  # vLLM's --shutdown-timeout: 0 aborts on SIGTERM
    api_server_count: int = 1
    cpus: list[int] | None = None  # None: this process's real affinity, read at start
    cpu_quota: float | None = None  # cores; None: the real cgroup's quota, if any
    cpu_contention: float = 0.0  # sim-only: the share of those CPUs other work takes
    numa_remote: bool = False  # the CPUs are on another NUMA node than the GPUs (scenarios)
    cpu_window_s: float = 1.0  # /sim/state's CPU use is averaged over this much time
    pid: int | None = None  # reported as the engine's pid; None: this process's
    mix: str = "chat"  # the synthetic traffic's workload mix (agents/sim/workload.MIXES)
    spec: SpecDecode | None = None  # --speculative-config; None: no speculative decoding
    # --lora-modules (name -> path), served with --enable-lora (engine.max_loras > 0); the
    # synthetic traffic asks for them too.
    lora_modules: dict[str, str] = field(default_factory=dict)
    # Clients in a closed loop instead of ``load``, each spending ``client_outside_s`` (the
    # median) outside the engine between its requests (agents/sim/workload.ClientLoad).
    clients: int = 0
    client_outside_s: float = 0.5


# vLLM 0.32's own messages: a request that reaches a draining server, and one that was running
# when the engine was shut down under it.
SHUTTING_DOWN = "cannot schedule new futures after shutdown"
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
ABORT_REPLY_S = 5.0  # for the aborted requests' replies to be written before the exit


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": None,
                          "code": self.status}}


class SimVllm:
    """Everything but HTTP: readiness, the engines, their metrics, the simulated state."""

    def __init__(self, options: SimOptions, clock: Callable[[], float] = time.monotonic) -> None:
        options.engine.check()  # fail at startup, like vLLM, when the KV cache cannot fit
        self.options = options
        self.clock = clock
        self.lock = threading.Lock()
        self.metrics = VllmExposition(options.engine, options.data_parallel_size, options.spec)
        self.ready_at = clock() + options.startup_seconds
        self.engines: list[EngineModel] = []
        self.closed = threading.Event()
        self.wake = threading.Event()  # tells the ticker a completion now waits
        self.waiters = 0
        self.draining = threading.Event()  # SIGTERM: refuse new work, finish what runs
        self.aborted = threading.Event()  # what still runs fails, as vLLM's abort does
        self.in_flight = 0  # HTTP requests between their first byte and their reply's last
        self.idle = threading.Condition(self.lock)
        self.stalled = False  # POST /sim/stall: the engine loops stand still until resumed
        self._seen_prompts: set[int] = set()
        self.pid = options.pid if options.pid is not None else os.getpid()
        self.cpus = sorted(options.cpus if options.cpus is not None else _affinity())
        self.cpu = CpuModel(CpuBudget(
            len(self.cpus), options.cpu_quota if options.cpu_quota is not None else
            _cgroup_quota(), options.cpu_contention, options.numa_remote,
            options.api_server_count), options.cpu_window_s)

    @property
    def ready(self) -> bool:
        with self.lock:
            return self._start_if_due()

    def _start_if_due(self) -> bool:
        if not self.engines and self.clock() >= self.ready_at:
            opts, now = self.options, self.clock()
            for rank, series in enumerate(self.metrics.engines):
                seed = None if opts.seed is None else opts.seed + rank
                self.engines.append(EngineModel(opts.engine, now, self._load(rank, seed),
                                                BatchedSeries(series), self.cpu, rank))
        return bool(self.engines)

    def _load(self, rank: int, seed: int | None) -> SyntheticLoad:
        """One data-parallel rank's share of the synthetic traffic."""
        opts, dp = self.options, self.options.data_parallel_size
        mix, loras = MIXES[opts.mix], tuple(self._loras())
        if opts.clients:
            clients = opts.clients // dp + (rank < opts.clients % dp)
            return ClientLoad(clients, opts.client_outside_s, opts.engine.max_model_len, seed,
                              mix, loras)
        return SyntheticLoad(opts.load / dp, opts.engine.max_model_len, seed, mix, loras)

    def tick(self) -> None:
        with self.lock:
            self._advance()

    def _advance(self) -> None:
        if not self._start_if_due() or self.stalled:
            return
        now = self.clock()
        for engine in self.engines:
            for request in engine.advance(now):
                if request.tag is not None:
                    request.tag.set()  # wake the HTTP handler waiting for it

    def stall(self) -> dict[str, Any]:
        """POST /sim/stall: every engine loop stops where it is now, as a wedged EngineCore
        does; the HTTP side goes on (health, metrics, new completions queued)."""
        with self.lock:
            self._advance()  # up to the moment of the stall, then no further
            self.stalled = True
            return self._held()

    def resume(self) -> dict[str, Any]:
        """POST /sim/resume: the engines go on from now; the time they stood still passes
        without a step, so what they held and what arrived meanwhile is served after it."""
        with self.lock:
            if self.stalled:
                now = self.clock()
                for engine in self.engines:
                    engine.skip_to(now)
                self.stalled = False
            self._advance()
            held = self._held()
        self.wake.set()  # the ticker answers the held completions at its busy pace
        return held

    def _held(self) -> dict[str, Any]:
        return {"stalled": self.stalled,
                "requests_running": sum(len(e.running) for e in self.engines),
                "requests_waiting": sum(len(e.waiting) for e in self.engines)}

    def scrape(self, accept: str, accept_encoding: str) -> tuple[bytes, dict[str, str]]:
        with self.lock:
            self._publish()
            return self.metrics.render(accept, accept_encoding)

    def scrape_families(self, registry: Any) -> bytes:
        """A scrape rendered from ``registry`` (a restriction of ``metrics.registry`` to the
        families a reader wants: the scenario driver's agent reads a handful of 60)."""
        with self.lock:
            self._publish()
            return prom.generate_latest(registry)

    def _publish(self) -> None:
        self._advance()
        for engine, series in zip(self.engines, self.metrics.engines, strict=False):
            series.set_state(len(engine.running), len(engine.waiting), engine.kv_cache_usage,
                             engine.waiting_deferred())
        # One gauge for the whole server, as in vLLM (which warns it is wrong with several
        # data-parallel engines): here, the adapters of all of them.
        self.metrics.set_lora({r.lora for e in self.engines for r in e.running if r.lora},
                              {r.lora for e in self.engines for r in e.waiting if r.lora})

    def _loras(self) -> list[str]:
        """The adapters served: none unless LoRA is on."""
        return list(self.options.lora_modules) if self.options.engine.max_loras else []

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/completions: queue the request, wait for the engine, answer like vLLM."""
        model = self.options.engine.model
        asked = body.get("model", model)
        if asked != model and asked not in self._loras():
            raise ApiError(404, f"The model `{body.get('model')}` does not exist.",
                           "NotFoundError")
        if body.get("stream"):
            raise ApiError(400, "stream is not supported by the simulated server")
        max_tokens = body.get("max_tokens", 16)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            raise ApiError(400, "max_tokens must be an integer")
        prompt = _prompt_tokens(body.get("prompt"))
        done = threading.Event()
        request = self._submit(prompt, max_tokens, self._seen(body.get("prompt")), done,
                               None if asked == model else asked)
        try:
            while not done.wait(0.1):
                if self.aborted.is_set() or self.closed.is_set():
                    raise ApiError(500, ENGINE_DEAD, "InternalServerError")
        finally:
            with self.lock:
                self.waiters -= 1
        return _completion(asked, request)

    def _submit(self, prompt: int, max_tokens: int, seen: bool, done: threading.Event,
                lora: str | None = None) -> Request:
        """Hand the request to the least loaded engine (vLLM's data-parallel balancing)."""
        with self.lock:
            self._advance()
            if not self.engines:
                raise ApiError(503, "the engine is starting", "ServiceUnavailableError")
            # Checked under the lock that counts waiters, so a drain sees every request it
            # must wait for.
            if self.draining.is_set():
                raise ApiError(500, SHUTTING_DOWN, "InternalServerError")
            engine = min(self.engines, key=lambda e: len(e.waiting) + len(e.running))
            spec = RequestSpec(prompt, max_tokens, max_tokens, prompt if seen else 0, lora)
            try:
                request = engine.submit(spec, self.clock(), tag=done)
            except ValueError as exc:
                raise ApiError(400, str(exc)) from None
            self.waiters += 1
        self.wake.set()
        return request

    def _seen(self, prompt: Any) -> bool:
        """A repeated prompt hits the prefix cache (a bounded memory of recent prompts)."""
        key = hash(json.dumps(prompt))
        seen = key in self._seen_prompts
        if len(self._seen_prompts) >= 4096:
            self._seen_prompts.clear()
        self._seen_prompts.add(key)
        return seen

    def enter(self) -> None:
        with self.lock:
            self.in_flight += 1

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until no HTTP request is in flight, at most timeout_s; False on timeout."""
        with self.lock:
            return self.idle.wait_for(lambda: self.in_flight == 0, timeout_s)

    def models(self) -> dict[str, Any]:
        model, created = self.options.engine.model, int(time.time())
        # vLLM lists each LoRA adapter beside the base model, with the base as its parent.
        served = [(model, model, None)] + [(name, self.options.lora_modules[name], model)
                                           for name in self._loras()]
        return {"object": "list", "data": [{
            "id": name, "object": "model", "created": created,
            "owned_by": "pitwall-sim", "root": root, "parent": parent,
            "max_model_len": self.options.engine.max_model_len}
            for name, root, parent in served]}

    def state(self) -> dict[str, Any]:
        """GET /sim/state: what the simulated GPUs follow (engine ranks averaged)."""
        opts, engines = self.options, self.engines
        with self.lock:
            self._advance()
            now, n = self.clock(), max(1, len(engines))
            return {
                "simulated": True, "pid": self.pid,
                "gpu_indices": list(opts.gpu_indices if opts.gpu_indices is not None else
                                    range(opts.engine.tensor_parallel_size *
                                          opts.data_parallel_size)),
                "gpu_memory_utilization": opts.engine.gpu_memory_utilization,
                "weights_bytes_per_gpu": opts.engine.weights_bytes_per_gpu,
                "kv_cache_usage": sum(e.kv_cache_usage for e in engines) / n,
                "busy_fraction": sum(e.busy_fraction(now) for e in engines) / n,
                "requests_running": sum(len(e.running) for e in engines),
                "requests_waiting": sum(len(e.waiting) for e in engines),
                **self._cpu_state(now)}

    def _cpu_state(self, now: float) -> dict[str, Any]:
        """The modeled CPU use per vLLM process role (this one process's real use means
        nothing): one engine core per data-parallel rank, ``api_server_count`` API servers."""
        usage = self.cpu.usage(now, self.options.data_parallel_size)
        roles = [{"role": "engine_core", "index": rank, "cpu_pct": pct}
                 for rank, pct in enumerate(usage["engine_core"])]  # type: ignore[arg-type]
        roles += [{"role": "api_server", "index": i, "cpu_pct": usage["api_server"]}
                  for i in range(max(1, self.options.api_server_count))]
        return {"processes": roles, "cpus": self.cpus,
                "cpu_throttled_pct": usage["throttled_pct"]}


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))  # the supervisor binds it; Linux only
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def _cgroup_quota() -> float | None:
    try:
        return CgroupThrottle("self", warn=lambda _: None).limit_cores()
    except Exception:  # no cgroup v2, unreadable: no quota known
        return None


def _completion(model: str, request: Request) -> dict[str, Any]:
    text = " ".join(_WORDS[i % len(_WORDS)] for i in range(request.generated))
    return {"id": f"cmpl-{id(request):x}", "object": "text_completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None,
                         "finish_reason": request.finish_reason, "stop_reason": None,
                         "prompt_logprobs": None}],
            "usage": {"prompt_tokens": request.prompt_tokens,
                      "total_tokens": request.prompt_tokens + request.generated,
                      "completion_tokens": request.generated, "prompt_tokens_details": None}}


def _prompt_tokens(prompt: Any) -> int:
    """Token count of a prompt: token ids as given, text at about 4 characters a token."""
    if isinstance(prompt, str) and prompt:
        return max(1, round(len(prompt) / 4))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    raise ApiError(400, "prompt must be a non-empty string or a list of token ids")


class Handler(BaseHTTPRequestHandler):
    server: SimHttpServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # the fleet runs several of these; access logs would drown the agent's output

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        # Counted until the reply is written, so a drain does not exit under a reply.
        self.server.sim.enter()
        try:
            self._answer(method)
        finally:
            self.server.sim.leave()

    def _answer(self, method: str) -> None:
        started, sim, path = time.perf_counter(), self.server.sim, self.path.split("?")[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            status, body, headers = self._dispatch(sim, method, path, raw)
        except ApiError as exc:
            status, body, headers = exc.status, _json(exc.body()), {}
        headers.setdefault("Content-Type", "application/json")
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)
        handler = path if path in _PATHS else "none"  # the instrumentator's untemplated name
        sim.metrics.observe_http(method, handler, status, length, len(body),
                                 time.perf_counter() - started)

    def _dispatch(self, sim: SimVllm, method: str, path: str,
                  raw: bytes) -> tuple[int, bytes, dict[str, str]]:
        if (method, path) == ("GET", "/sim/state"):
            return 200, _json(sim.state()), {}
        if method == "POST" and path in _SIM_CONTROLS:
            return 200, _json(_SIM_CONTROLS[path](sim)), {}
        if (method, path) not in _ROUTES:
            raise ApiError(404, "Not Found", "NotFoundError")
        if not sim.ready:
            raise ApiError(503, "the engine is starting", "ServiceUnavailableError")
        if path == "/health":
            return 200, b"", {}  # vLLM's still says healthy while it drains
        if path == "/metrics":
            return 200, *sim.scrape(self.headers.get("Accept", ""),
                                    self.headers.get("Accept-Encoding", ""))
        if path == "/v1/models":
            return 200, _json(sim.models()), {}
        if path == "/version":
            return 200, _json({"version": VLLM_VERSION}), {}
        try:
            request = json.loads(raw or b"{}")
        except ValueError:
            raise ApiError(400, "the body is not JSON") from None
        if not isinstance(request, dict):
            raise ApiError(400, "the body must be a JSON object")
        return 200, _json(sim.complete(request)), {}


_ROUTES = {("GET", "/health"), ("GET", "/metrics"), ("GET", "/v1/models"),
           ("GET", "/version"), ("POST", "/v1/completions")}
_PATHS = {path for _, path in _ROUTES} | {"/sim/state"}
# The simulation's own controls (no vLLM has them); their calls count under handler "none",
# as a path vLLM does not serve would.
_SIM_CONTROLS: dict[str, Callable[[SimVllm], dict[str, Any]]] = {
    "/sim/stall": SimVllm.stall, "/sim/resume": SimVllm.resume}


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


class SimHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, sim: SimVllm, host: str, port: int) -> None:
        self.sim = sim
        super().__init__((host, port), Handler)


class RunningServer:
    """A SimVllm served on a port, with its ticker; ``close()`` stops both."""

    def __init__(self, sim: SimVllm, httpd: SimHttpServer) -> None:
        self.sim, self.httpd = sim, httpd
        self._threads = [threading.Thread(target=httpd.serve_forever, daemon=True),
                         threading.Thread(target=self._tick, daemon=True)]
        for thread in self._threads:
            thread.start()

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def _tick(self) -> None:
        sim = self.sim
        while not sim.closed.is_set():
            sim.wake.wait(TICK_BUSY_S if sim.waiters else TICK_IDLE_S)
            sim.wake.clear()
            sim.tick()

    def drain(self, timeout_s: float) -> bool:
        """Refuse new completions and let the running ones answer for at most timeout_s;
        what still runs then is aborted (False), as vLLM does after its shutdown timeout."""
        self.sim.draining.set()
        if timeout_s > 0 and self.sim.wait_idle(timeout_s):
            return True
        self.abort()
        return timeout_s <= 0

    def abort(self) -> None:
        """Fail every running completion with vLLM's 500 and wait until each has answered."""
        self.sim.draining.set()
        self.sim.aborted.set()
        self.sim.wait_idle(ABORT_REPLY_S)

    def close(self) -> None:
        self.sim.closed.set()
        self.sim.wake.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        for thread in self._threads:
            thread.join()


def start(options: SimOptions, clock: Callable[[], float] = time.monotonic) -> RunningServer:
    sim = SimVllm(options, clock)
    return RunningServer(sim, SimHttpServer(sim, options.host, options.port))


if __name__ == "__main__":
    from agents.sim.vllm_cli import main

    sys.exit(main())
