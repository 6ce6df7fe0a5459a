"""Synthetic traffic for the simulated vLLM, lengths from a seeded mix: Poisson arrivals (an
open loop: requests come whatever the engine does) or a fixed number of clients in a closed
loop (each sends its next request once its last one is answered).

A mix is a tuple of workloads, each (weight, prompt median, sigma, output median, sigma,
P(shared prefix), shared share of the prompt), with lognormal lengths as in the public
chat/RAG traces. ``MIXES`` names the ones the scenarios use. Given LoRA adapters, a share of
the requests asks for one of them, the first ones most often (a few hot adapters, a long tail).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

Workload = tuple[float, int, float, int, float, float, tuple[float, float]]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    prompt_tokens: int
    max_tokens: int
    output_tokens: int  # where generation would stop by itself ("stop"), if under max_tokens
    cached_tokens: int = 0  # prompt prefix the prefix cache holds (a shared system prompt)
    lora: str | None = None  # the LoRA adapter asked for, None: the base model


CHAT: tuple[Workload, ...] = (
    (0.60, 700, 0.9, 220, 0.8, 0.8, (0.3, 0.7)),  # chat: system prompts shared
    (0.25, 2800, 0.6, 160, 0.6, 0.3, (0.05, 0.3)),  # RAG / summaries: long prompts
    (0.15, 450, 0.8, 650, 0.7, 0.6, (0.4, 0.9)),  # code: long outputs
)
# Retrieval-heavy traffic: prompts of several thousand tokens, short answers, little reuse.
LONG_PROMPTS: tuple[Workload, ...] = (
    (0.7, 6000, 0.5, 180, 0.5, 0.1, (0.05, 0.2)),
    (0.3, 1500, 0.6, 250, 0.6, 0.3, (0.1, 0.4)),
)
MIXES: dict[str, tuple[Workload, ...]] = {"chat": CHAT, "long_prompts": LONG_PROMPTS}
_MAX_TOKENS = (256, 512, 1024, 2048)
LORA_SHARE = 0.7  # of the requests, when adapters are served
# Spread of a client's time outside the engine (lognormal sigma): its HTTP, tokenisation and
# detokenisation, and its own turnaround, vary from one request to the next.
OUTSIDE_SIGMA = 0.5


class SyntheticLoad:
    """Poisson arrivals at ``rate`` requests/s, lengths drawn from the seeded mix."""

    closed_loop = False  # the next arrival is drawn when one arrives, not when one finishes

    def __init__(self, rate: float, max_model_len: int, seed: int | None = None,
                 mix: tuple[Workload, ...] = CHAT, loras: tuple[str, ...] = ()) -> None:
        self.rate = rate
        self.max_model_len = max_model_len
        self.rng = random.Random(seed)
        self.mix = mix
        self._weights = [w[0] for w in mix]
        self.loras = loras
        self._lora_weights = [1 / (i + 1) for i in range(len(loras))]

    def first_arrivals(self, start: float) -> list[tuple[float, RequestSpec]]:
        return [self.next_after(start)]

    def next_after(self, t: float) -> tuple[float, RequestSpec]:
        gap = self.rng.expovariate(self.rate) if self.rate > 0 else math.inf
        return t + gap, self.draw()

    def draw(self) -> RequestSpec:
        rng = self.rng
        _, p_med, p_sig, o_med, o_sig, p_shared, (lo, hi) = rng.choices(
            self.mix, self._weights)[0]
        prompt = min(max(1, int(rng.lognormvariate(math.log(p_med), p_sig))),
                     self.max_model_len - 1)
        max_tokens = min(rng.choice(_MAX_TOKENS), self.max_model_len - prompt)
        output = max(1, int(rng.lognormvariate(math.log(o_med), o_sig)))
        cached = int(prompt * rng.uniform(lo, hi)) if rng.random() < p_shared else 0
        return RequestSpec(prompt, max_tokens, output, cached, self._lora())

    def _lora(self) -> str | None:
        # Drawn only when adapters are served, so a seeded load without them stays the same.
        if not self.loras or self.rng.random() >= LORA_SHARE:
            return None
        return self.rng.choices(self.loras, self._lora_weights)[0]


class ClientLoad(SyntheticLoad):
    """``clients`` clients in a closed loop, as a benchmark, a batch job or a pool of workers
    drives an engine: each sends its next request once the engine has finished its last one
    and ``outside_s`` (the median) has passed outside the engine: the answer's detokenisation
    and HTTP, the client's own turnaround, the next request's HTTP and tokenisation. Measured
    on vLLM 0.32, that time is why an engine with more clients than ``max_num_seqs`` still
    runs below the cap on average and its queue empties within most minutes: requests finish
    together and come back together. ``spec``: every request the same (a benchmark's), else
    drawn from the mix."""

    closed_loop = True

    def __init__(self, clients: int, outside_s: float, max_model_len: int,
                 seed: int | None = None, mix: tuple[Workload, ...] = CHAT,
                 loras: tuple[str, ...] = (), spec: RequestSpec | None = None) -> None:
        super().__init__(0.0, max_model_len, seed, mix, loras)
        self.clients = clients
        self.outside_s = outside_s
        self.spec = spec

    def first_arrivals(self, start: float) -> list[tuple[float, RequestSpec]]:
        # Spread over one outside time: clients that start in one instant stay in step.
        return [(start + self.rng.uniform(0.0, self.outside_s), self.draw())
                for _ in range(self.clients)]

    def next_after(self, t: float) -> tuple[float, RequestSpec]:
        if self.outside_s <= 0:
            return t, self.draw()
        return t + self.rng.lognormvariate(math.log(self.outside_s), OUTSIDE_SIGMA), self.draw()

    def draw(self) -> RequestSpec:
        return self.spec if self.spec is not None else super().draw()
