"""A vLLM V1 engine reduced to its scheduling arithmetic: pure logic, time injected.

The engine runs steps back to back while it has work. Each step schedules running requests
first (one decode token, or the next prefill chunk), then admits waiting ones, all within
``max_num_batched_tokens``; KV blocks are allocated as requests grow and, when they run out,
the newest running request is preempted (recompute: its KV is dropped and it goes back to the
front of the queue), as vLLM's scheduler does. A step lasts as long as a roofline says the GPU
would need (read the weights and the batch's KV once, plus matmul FLOPs for every token).
Nothing here sleeps or reads a clock: ``advance(until)`` simulates up to a time the caller
gives, so tests step hours of traffic in milliseconds. Requests come from the caller
(``submit``) or from a load (workload.py): Poisson arrivals, or clients in a closed loop whose
next request comes some time after their last one finished.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents.sim.cpu_model import CpuModel
from agents.sim.workload import ClientLoad, RequestSpec, SyntheticLoad
from agents.vllm_args import serve_default

__all__ = ["ClientLoad", "EngineConfig", "EngineModel", "Request", "RequestSpec", "StepStats",
           "SyntheticLoad", "params_from_model_name"]

GIB = 1 << 30
HBM_BYTES_PER_S = 3.0e12  # effective HBM bandwidth of an H100/H200-class GPU
FLOPS_PER_S = 4.0e14  # effective dense bf16 matmul throughput of the same
STEP_OVERHEAD_S = 0.003  # scheduling, sampling, kernel launches
NON_KV_RESERVE_BYTES = 2 * GIB  # activations, CUDA graphs, NCCL buffers per GPU
KV_BYTES_PER_TOKEN_8B = 131072  # Llama-3.1-8B: 32 layers x 8 KV heads x 128 dims x K,V x bf16
DEFAULT_PARAMS = 8e9
BUSY_WINDOW_S = 1.0

_MOE = re.compile(r"(\d+)x(\d+(?:\.\d+)?)b(?![a-z0-9])", re.IGNORECASE)
_SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)([bm])(?![a-z0-9])", re.IGNORECASE)


def params_from_model_name(model: str) -> float:
    """Parameter count read from a Hugging Face name ("Llama-3.1-70B" -> 70e9), else 8e9."""
    name = model.rsplit("/", 1)[-1]
    if moe := _MOE.search(name):
        return int(moe.group(1)) * float(moe.group(2)) * 1e9
    sizes = _SIZE.findall(name)
    if not sizes:
        return DEFAULT_PARAMS
    value, unit = sizes[-1]
    return float(value) * (1e9 if unit.lower() == "b" else 1e6)


@dataclass(frozen=True)
class EngineConfig:
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    # None: what `vllm serve` picks when not given, for a GPU of gpu_mem_bytes (the argument
    # catalog's defaults, agents.vllm_args.serve_default); set by __post_init__.
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float = serve_default("gpu_memory_utilization")
    tensor_parallel_size: int = 1
    block_size: int = 16
    max_model_len: int = 8192
    gpu_mem_bytes: int = 80 * GIB
    max_loras: int = 0  # vLLM's --max-loras with --enable-lora; 0: LoRA off
    num_gpu_blocks_override: int | None = None  # vLLM's: the KV cache's size in blocks

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, serve_default(name, self.gpu_mem_bytes))

    # Cached: the engine asks for these every step, and the name is parsed with regexes.
    @functools.cached_property
    def params(self) -> float:
        return params_from_model_name(self.model)

    @functools.cached_property
    def weights_bytes_per_gpu(self) -> int:
        return int(self.params * 2 / self.tensor_parallel_size)  # bf16, sharded by TP

    @functools.cached_property
    def kv_bytes_per_token_per_gpu(self) -> float:
        # KV width grows roughly with the square root of the parameter count across the
        # Llama/Qwen families (70B: 320 KiB/token, 8B: 128 KiB); TP shards the KV heads.
        per_token = KV_BYTES_PER_TOKEN_8B * math.sqrt(self.params / DEFAULT_PARAMS)
        return per_token / self.tensor_parallel_size

    @property
    def num_gpu_blocks(self) -> int:
        if self.num_gpu_blocks_override is not None:
            return self.num_gpu_blocks_override
        budget = self.gpu_memory_utilization * self.gpu_mem_bytes
        free = budget - self.weights_bytes_per_gpu - NON_KV_RESERVE_BYTES
        return max(0, int(free // (self.kv_bytes_per_token_per_gpu * self.block_size)))

    def check(self) -> None:
        """Refuse configs vLLM would refuse at startup, with its kind of message."""
        needed = math.ceil(self.max_model_len / self.block_size)
        if self.num_gpu_blocks < needed:
            raise ValueError(
                f"The model's max seq len ({self.max_model_len}) is larger than the maximum "
                f"number of tokens that can be stored in KV cache "
                f"({self.num_gpu_blocks * self.block_size}). Try increasing "
                "`gpu_memory_utilization` or decreasing `max_model_len` when initializing "
                "the engine.")

    def step_seconds(self, tokens: int, kv_tokens: int) -> float:
        """One forward pass: weights and the batch's KV read once, 2 FLOPs/param/token."""
        read = self.weights_bytes_per_gpu + kv_tokens * self.kv_bytes_per_token_per_gpu
        compute = 2 * self.params / self.tensor_parallel_size * tokens
        return STEP_OVERHEAD_S + read / HBM_BYTES_PER_S + compute / FLOPS_PER_S


class Request:
    """One request's progress and timestamps (vLLM's RequestStats, in simulated seconds)."""

    __slots__ = ("prompt_tokens", "max_tokens", "output_tokens", "cached_tokens", "arrival",
                 "tag", "synthetic", "queued_ts", "scheduled_ts", "first_token_ts",
                 "last_token_ts", "finished_ts", "generated", "computed", "blocks",
                 "preemptions", "finish_reason", "lora")

    def __init__(self, spec: RequestSpec, arrival: float, tag: Any = None,
                 synthetic: bool = False) -> None:
        self.prompt_tokens = spec.prompt_tokens
        self.max_tokens = spec.max_tokens
        self.output_tokens = min(spec.output_tokens, spec.max_tokens)
        self.cached_tokens = spec.cached_tokens
        self.lora = spec.lora
        self.arrival = arrival
        self.tag = tag  # the caller's handle (an HTTP waiter); the engine never reads it
        self.synthetic = synthetic  # drawn from the engine's own load
        # The scheduler's queue takes arrivals between steps: vLLM's queue time starts here
        # (its QUEUED event), its TTFT and e2e latency at the arrival.
        self.queued_ts = arrival
        self.scheduled_ts: float | None = None
        self.first_token_ts = self.last_token_ts = self.finished_ts = 0.0
        self.generated = self.computed = self.blocks = self.preemptions = 0
        self.finish_reason = ""

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.generated


@dataclass
class StepStats:
    """What one step did, for the metrics (vLLM's IterationStats plus the scheduler's)."""

    start: float
    end: float = 0.0
    tokens: int = 0  # iteration tokens: prefill chunks + decodes
    prompt_tokens: int = 0  # prompts of requests whose first token came this step
    prompt_cached_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    ttfts: list[float] = field(default_factory=list)
    itls: list[float] = field(default_factory=list)
    new_requests: int = 0  # scheduled for the first time: the API server tokenised them
    new_prompt_tokens: int = 0
    # Identical decode-only iterations folded into one record (see EngineModel._coast):
    # ``steps`` of them, each of ``tokens``; their ITLs as (seconds, how many) pairs.
    steps: int = 1
    itl_runs: list[tuple[float, int]] = field(default_factory=list)


class StatsSink(Protocol):
    def on_step(self, step: StepStats) -> None: ...

    def on_finished(self, request: Request) -> None: ...


class EngineModel:
    """One engine (one data-parallel rank). Feed it requests, ``advance`` it through time."""

    def __init__(self, config: EngineConfig, start: float = 0.0,
                 load: SyntheticLoad | ClientLoad | None = None,
                 sink: StatsSink | None = None,
                 cpu: CpuModel | None = None, rank: int = 0) -> None:
        config.check()
        self.config = config
        self.cpu = cpu  # None: the CPU is never the bottleneck (the model before CPUs)
        self.rank = rank
        self.now = start
        self.sink = sink
        self.load = load
        self.num_gpu_blocks = config.num_gpu_blocks
        self.used_blocks = 0
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        self._arrivals: list[tuple[float, int, Request]] = []
        self._seq = itertools.count()
        self._busy: deque[tuple[float, float]] = deque()
        for arrival, spec in load.first_arrivals(start) if load is not None else ():
            self.submit(spec, arrival, synthetic=True)

    @property
    def kv_cache_usage(self) -> float:
        return self.used_blocks / self.num_gpu_blocks

    def running_loras(self) -> set[str]:
        return {r.lora for r in self.running if r.lora}

    def waiting_deferred(self) -> int:
        """Waiting requests held back by the LoRA budget: their adapter is not running and
        ``max_loras`` others are (vLLM's "deferred" waiting reason)."""
        if not self.config.max_loras:
            return 0
        loras = self.running_loras()
        if len(loras) < self.config.max_loras:
            return 0
        return sum(1 for r in self.waiting if r.lora and r.lora not in loras)

    def busy_fraction(self, now: float) -> float:
        """Share of the last second before ``now`` during which a step was running."""
        busy = sum(max(0.0, min(end, now) - max(start, now - BUSY_WINDOW_S))
                   for start, end in self._busy)
        return min(1.0, busy / BUSY_WINDOW_S)

    def submit(self, spec: RequestSpec, arrival: float, tag: Any = None,
               synthetic: bool = False) -> Request:
        """Queue a request arriving at ``arrival``; refuse it the way vLLM's API would."""
        total = spec.prompt_tokens + spec.max_tokens
        if spec.prompt_tokens < 1 or spec.max_tokens < 1:
            raise ValueError("prompt and max_tokens must be at least 1 token")
        if total > self.config.max_model_len:
            raise ValueError(
                f"This model's maximum context length is {self.config.max_model_len} tokens. "
                f"However, you requested {total} tokens ({spec.prompt_tokens} in the messages, "
                f"{spec.max_tokens} in the completion). Please reduce the length of the "
                "messages or completion.")
        request = Request(spec, arrival, tag, synthetic)
        heapq.heappush(self._arrivals, (arrival, next(self._seq), request))
        return request

    def skip_to(self, t: float) -> None:
        """Let time pass to ``t`` without a step: the engine loop stood still (a wedged or
        stopped EngineCore). What arrived meanwhile is admitted to the queue at ``t``."""
        self.now = max(self.now, t)

    def advance(self, until: float) -> list[Request]:
        """Run steps until simulated time reaches ``until``; return the requests finished.

        A step in flight at ``until`` completes, so ``now`` may pass ``until`` by one step.
        """
        finished: list[Request] = []
        while True:
            self._admit_arrivals()
            if not self.running and not self.waiting:
                nxt = self._arrivals[0][0] if self._arrivals else math.inf
                if nxt > until:
                    self.now = max(self.now, until)
                    return finished
                self.now = max(self.now, nxt)
                continue
            if self.now >= until:
                return finished
            if not self._coast(until):
                finished.extend(self._step())

    def _push_synthetic(self, after: float) -> None:
        arrival, spec = self.load.next_after(after)  # type: ignore[union-attr]
        if arrival < math.inf:
            self.submit(spec, arrival, synthetic=True)

    def _admit_arrivals(self) -> None:
        while self._arrivals and self._arrivals[0][0] <= self.now:
            arrival, _, request = heapq.heappop(self._arrivals)
            request.queued_ts = self.now
            self.waiting.append(request)
            # Draw the next one only now: the load stays a lazy Poisson stream.
            if request.synthetic and not self.load.closed_loop:  # type: ignore[union-attr]
                self._push_synthetic(arrival)

    def _step(self) -> list[Request]:
        stats = StepStats(start=self.now)
        batch = self._schedule(stats)
        kv_tokens = outputs = 0
        for request, n in batch:
            kv_tokens += request.computed + n
            outputs += request.computed + n >= request.num_tokens  # this step samples a token
        gpu_s = self.config.step_seconds(stats.tokens, kv_tokens)
        wall = self._wall(gpu_s, len(batch), stats.tokens - outputs, stats, outputs)
        stats.end = self.now = self.now + wall
        self._mark_busy(stats.start, stats.start + gpu_s)
        finished = self._apply(batch, stats)
        if self.sink is not None:
            self.sink.on_step(stats)
            for request in finished:
                self.sink.on_finished(request)
        return finished

    def _coast(self, until: float) -> bool:
        from agents.sim.engine_coast import coast  # it reads this module's classes

        return coast(self, until)

    def _wall(self, gpu_s: float, seqs: int, prefill: int, stats: Any,
              outputs: int) -> float:
        if self.cpu is None:
            return gpu_s
        return self.cpu.step(self.rank, self.now, gpu_s, seqs, prefill,
                             stats.new_requests, stats.new_prompt_tokens, outputs)

    def _mark_busy(self, start: float, end: float) -> None:
        """The GPU ran a step from start to end (a CPU-stretched step idles it after)."""
        self._busy.append((start, end))
        while self._busy and self._busy[0][1] < end - BUSY_WINDOW_S:
            self._busy.popleft()

    def _schedule(self, stats: StepStats) -> list[tuple[Request, int]]:
        budget = self.config.max_num_batched_tokens
        batch: list[tuple[Request, int]] = []
        i = 0
        while i < len(self.running) and budget > 0:  # preemption pops from the end
            request = self.running[i]
            n = min(request.num_tokens - request.computed, budget)
            if not self._grow(request, n, stats):
                break
            batch.append((request, n))
            budget -= n
            i += 1
        if stats.preemptions == 0:  # like vLLM: no admissions in a step that preempted
            self._admit_waiting(batch, budget, stats)
        stats.tokens = sum(n for _, n in batch)
        return batch

    def _grow(self, request: Request, n: int, stats: StepStats) -> bool:
        """Allocate the blocks ``n`` more tokens need, preempting the newest runners."""
        need = self._blocks_for(request.computed + n) - request.blocks
        while need > self.num_gpu_blocks - self.used_blocks:
            victim = self.running.pop()
            self._preempt(victim, stats)
            if victim is request:
                return False
        request.blocks += need
        self.used_blocks += need
        return True

    def _preempt(self, request: Request, stats: StepStats) -> None:
        self.used_blocks -= request.blocks
        request.blocks = request.computed = 0
        request.preemptions += 1
        stats.preemptions += 1
        self.waiting.appendleft(request)

    def _admit_waiting(self, batch: list[tuple[Request, int]], budget: int,
                       stats: StepStats) -> None:
        bs = self.config.block_size
        seqs = self.config.max_num_seqs
        loras = self.running_loras() if self.config.max_loras else None
        i = 0  # requests the LoRA budget defers stay in place; the next ones may go ahead
        while i < len(self.waiting) and budget > 0 and len(self.running) < seqs:
            request = self.waiting[i]
            if self._over_lora_budget(request, loras):
                i += 1
                continue
            # Prefix-cache hit: whole blocks, and never the last token (it must be computed).
            hit = min(request.cached_tokens, request.num_tokens - 1) // bs * bs
            n = min(request.num_tokens - hit, budget)
            need = self._blocks_for(hit + n)
            if need > self.num_gpu_blocks - self.used_blocks:
                return
            del self.waiting[i]
            if loras is not None and request.lora:
                loras.add(request.lora)
            request.computed, request.blocks = hit, need
            self.used_blocks += need
            if request.scheduled_ts is None:
                request.scheduled_ts = self.now
                request.cached_tokens = hit  # what vLLM reports as the request's cached tokens
                stats.new_requests += 1
                stats.new_prompt_tokens += request.prompt_tokens
            stats.prefix_queries += request.num_tokens
            stats.prefix_hits += hit
            self.running.append(request)
            batch.append((request, n))
            budget -= n

    def _over_lora_budget(self, request: Request, loras: set[str] | None) -> bool:
        """vLLM schedules at most max_loras distinct adapters at once."""
        return (loras is not None and request.lora is not None and request.lora not in loras
                and len(loras) >= self.config.max_loras)

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)

    def _apply(self, batch: list[tuple[Request, int]], stats: StepStats) -> list[Request]:
        t = stats.end
        finished: list[Request] = []
        for request, n in batch:
            request.computed += n
            if request.computed < request.num_tokens:
                continue  # a prefill chunk that did not reach the end of the prompt
            if request.generated == 0:
                request.first_token_ts = t
                stats.ttfts.append(t - request.arrival)
                stats.prompt_tokens += request.prompt_tokens
                stats.prompt_cached_tokens += request.cached_tokens
            else:
                stats.itls.append(t - request.last_token_ts)
            request.generated += 1
            request.last_token_ts = t
            stats.generation_tokens += 1
            if request.generated >= request.output_tokens:
                self._finish(request, t)
                finished.append(request)
        if finished:
            self.running = [r for r in self.running if not r.finish_reason]
        return finished

    def _finish(self, request: Request, t: float) -> None:
        request.finished_ts = t
        request.finish_reason = "length" if request.generated >= request.max_tokens else "stop"
        self.used_blocks -= request.blocks
        request.blocks = 0
        if request.synthetic and self.load.closed_loop:  # type: ignore[union-attr]
            self._push_synthetic(t)  # its client sends the next one
