"""The CPU side of the simulated vLLM: what serving costs the host's CPUs, and what a CPU
shortage costs the GPU.

vLLM V1 runs the OpenAI API server (HTTP, chat template, tokenisation, incremental
detokenisation and streaming of every output token) in its own process(es), and the engine
core (scheduler, input preparation, sampling bookkeeping, output processing) in another, as a
single-threaded busy loop that drives the GPU one step at a time (vLLM blog, "vLLM V1: A Major
Upgrade to vLLM's Core Architecture", 2025-01-27). How much that CPU work weighs: the vLLM
v0.6.0 blog (2024-09-05) measured Llama-3-8B on one H100 spending 33 % of its time in the API
server and 29 % in scheduling and input preparation against 38 % on the GPU, which is why V1
split the processes and why ``--api-server-count`` exists (vLLM docs, data-parallel
deployment: more API server processes when the frontend is the bottleneck). The constants
below are per-unit costs of that order on a current server core; they are estimates, not
measurements of any one CPU.

The model. While it has requests, the engine core never sleeps: its loop schedules, launches
the step and waits for the GPU by polling (and CUDA's default synchronisation spins), so it
wants a full core, and reads ~100 % in top on a busy real server. Its useful CPU work per
step (``engine``) overlaps the GPU's; it only sets the pace when it is longer than the GPU's
part (small models, huge batches). The API servers want ``api`` CPU seconds per step for the
requests and tokens of that step, spread over ``api_server_count`` single-threaded processes.
The instance gets ``cores`` = min(CPUs in its affinity, cgroup quota) x (1 - contention).
When its processes want more than that, each runs only ``progress`` = cores / demand of the
time (CFS fair shares; under a quota the whole group is frozen for the rest of each period):
while the engine core is off the CPU no step is launched, so a step lasts its time divided by
``progress`` and the GPU idles for the difference. With enough CPU ``progress`` is 1 and
nothing changes. So a CPU-starved instance shows a GPU below full utilisation, a longer queue
and higher TTFT; under a quota also ``host.cpu_throttled_pct``; and a CPU-bound engine core
(or API server) shows a process pinned at a full core while its GPU waits.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

ENGINE_STEP_S = 0.002  # per step: scheduler pass, persistent-batch update, ZMQ round trip
ENGINE_PER_SEQ_S = 2e-5  # per scheduled request per step: scheduling, inputs, stop checks
ENGINE_PER_PREFILL_TOKEN_S = 5e-8  # prefix-cache block hashing, token ids and positions
API_PER_REQUEST_S = 0.003  # HTTP parse, pydantic validation, chat template, request setup
API_PER_PROMPT_TOKEN_S = 1.5e-6  # fast (Rust) tokenizer: ~0.7 M tokens/s on one core
API_PER_OUTPUT_TOKEN_S = 3e-5  # incremental detokenisation + one SSE chunk per token
NUMA_REMOTE_FACTOR = 1.25  # CPU work on the far socket: remote memory, pinned-buffer copies


@dataclass(frozen=True)
class CpuBudget:
    """The CPUs one vLLM instance gets, and where they are."""

    cpus: int  # CPUs in the processes' affinity (os.sched_getaffinity)
    quota_cores: float | None = None  # cgroup v2 cpu.max quota / period
    contention: float = 0.0  # 0-1: the share of those CPUs other work takes
    numa_remote: bool = False  # the processes run on another NUMA node than their GPUs
    api_server_count: int = 1

    @property
    def cores(self) -> float:
        limit = self.cpus if self.quota_cores is None else min(self.cpus, self.quota_cores)
        return max(0.01, limit * (1.0 - min(0.99, max(0.0, self.contention))))


@dataclass
class _Slice:
    start: float
    end: float
    rank: int
    engine_s: float  # CPU seconds the engine core was on a CPU (working or polling)
    api_s: float  # CPU seconds all API servers used for it
    throttled: bool  # the cgroup quota bound during this step


class CpuModel:
    """Turns each step's GPU time into its wall time, and keeps the CPU use it cost."""

    def __init__(self, budget: CpuBudget, window_s: float = 1.0) -> None:
        self.budget = budget
        self.window_s = window_s
        self.engine_cpu_s: dict[int, float] = {}  # cumulative, per data-parallel rank
        self.api_cpu_s = 0.0  # cumulative, all API servers
        self.throttled_s = 0.0  # cumulative wall time with the quota binding
        self._recent: deque[_Slice] = deque()
        self._factor = NUMA_REMOTE_FACTOR if budget.numa_remote else 1.0

    def step(self, rank: int, start: float, gpu_s: float, seqs: int,
             prefill_tokens: int, new_requests: int, new_prompt_tokens: int,
             output_tokens: int) -> float:
        """The wall time of one engine step whose GPU part lasts ``gpu_s``."""
        b, f = self.budget, self._factor
        engine = f * (ENGINE_STEP_S + ENGINE_PER_SEQ_S * seqs
                      + ENGINE_PER_PREFILL_TOKEN_S * prefill_tokens)
        api = f * (API_PER_REQUEST_S * new_requests + API_PER_PROMPT_TOKEN_S * new_prompt_tokens
                   + API_PER_OUTPUT_TOKEN_S * output_tokens)
        servers = max(1, b.api_server_count)
        pace = max(gpu_s, engine, api / servers)  # the slowest of GPU, engine core, API server
        # Cores wanted: the engine core's full one, and each API server's share (<= 1 core).
        demand = 1.0 + servers * min(1.0, api / servers / pace)
        progress = min(1.0, b.cores / demand)
        wall = pace / progress
        throttled = b.quota_cores is not None and demand > b.quota_cores
        self._record(_Slice(start, start + wall, rank, wall * progress, api, throttled))
        return wall

    def _record(self, s: _Slice) -> None:
        self.engine_cpu_s[s.rank] = self.engine_cpu_s.get(s.rank, 0.0) + s.engine_s
        self.api_cpu_s += s.api_s
        if s.throttled:
            self.throttled_s += s.end - s.start
        self._recent.append(s)
        while self._recent and self._recent[0].end < s.end - self.window_s:
            self._recent.popleft()

    def usage(self, now: float, ranks: int = 1) -> dict[str, object]:
        """CPU use over the window before ``now``: 100 = one core, as proc.cpu_pct."""
        lo, engine, api, throttled = now - self.window_s, [0.0] * ranks, 0.0, 0.0
        for s in self._recent:
            share = _overlap(s.start, s.end, lo, now) / (s.end - s.start or math.inf)
            if s.rank < ranks:
                engine[s.rank] += s.engine_s * share
            api += s.api_s * share
            throttled += (s.end - s.start) * share if s.throttled else 0.0
        servers = max(1, self.budget.api_server_count)
        return {"engine_core": [round(100 * e / self.window_s, 2) for e in engine],
                "api_server": round(100 * api / servers / self.window_s, 2),
                "throttled_pct": round(min(100.0, 100 * throttled / self.window_s), 2)}


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))
