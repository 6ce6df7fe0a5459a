"""Steady clients through a service's router, and everything they saw.

Every request is kept with its start, its time to first token and its outcome, so a test can
ask what the clients saw in any span (steady state, a rollout, a stall) and a benchmark can
print it. Nothing is retried here: a request the router or a replica failed or refused counts
as failed at the client, which is the figure a service promises to keep at 0.

The clients stream (a real vLLM's replicas: the time to first token is measured), or, with
``stream=False``, read each answer whole (the simulated vLLM serves no streams; no time to
first token then).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass

from tests.real_vllm.engine import PHRASE, PHRASE_TOKENS


@dataclass(frozen=True)
class Sent:
    start: float  # unix seconds
    ttft_s: float | None  # None: no token came
    end: float
    tokens: int
    error: str  # "" when it completed with every token


class ServiceLoad:
    """``clients`` threads, each streaming one completion after another through ``url``."""

    def __init__(self, url: str, model: str, clients: int = 4, prompt_tokens: int = 48,
                 max_tokens: int = 48, pause_s: float = 0.2, stream: bool = True) -> None:
        self.url, self.model, self.stream = url.rstrip("/"), model, stream
        self.prompt_tokens, self.max_tokens, self.pause_s = prompt_tokens, max_tokens, pause_s
        self.sent: list[Sent] = []
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._nonce = uuid.uuid4().hex[:8]
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                         for i in range(clients)]

    def start(self) -> ServiceLoad:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float = 300) -> None:
        self._halt.set()
        for thread in self._threads:
            thread.join(timeout)

    def between(self, start: float, end: float) -> list[Sent]:
        """The requests sent in [start, end)."""
        with self._lock:
            return [s for s in self.sent if start <= s.start < end]

    def failed(self, start: float = 0.0, end: float = float("inf")) -> list[Sent]:
        return [s for s in self.between(start, end) if s.error]

    def _client(self, i: int) -> None:
        n = 0
        while not self._halt.is_set():
            n += 1
            prompt = (f"{self._nonce} {i} {n} "
                      + PHRASE * (self.prompt_tokens // PHRASE_TOKENS))
            sent = self._one(prompt)
            with self._lock:
                self.sent.append(sent)
            self._halt.wait(self.pause_s)

    def _one(self, prompt: str) -> Sent:
        body = {"model": self.model, "prompt": prompt, "max_tokens": self.max_tokens,
                "ignore_eos": True, "stream": self.stream}
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        request = urllib.request.Request(f"{self.url}/v1/completions",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        start, first, tokens, chunks = time.time(), None, None, 0
        try:
            with urllib.request.urlopen(request, timeout=300) as reply:
                if not self.stream:
                    tokens = json.loads(reply.read())["usage"]["completion_tokens"]
                else:
                    for raw in reply:
                        line = raw.decode(errors="replace").strip()
                        if not line.startswith("data: {"):
                            continue
                        chunk = json.loads(line[len("data: "):])
                        if chunk.get("choices"):
                            chunks += 1
                            first = first or time.time()
                        if chunk.get("usage"):
                            tokens = chunk["usage"]["completion_tokens"]
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode(errors="replace")
            return Sent(start, None, time.time(), 0, f"HTTP {exc.code}: {detail}")
        except (OSError, ValueError) as exc:
            return Sent(start, _since(start, first), time.time(), chunks, repr(exc)[:200])
        got = tokens if tokens is not None else chunks
        error = "" if got == self.max_tokens else f"{got} of {self.max_tokens} tokens"
        return Sent(start, _since(start, first), time.time(), got, error)


def _since(start: float, first: float | None) -> float | None:
    return None if first is None else first - start


def p99(values: list[float]) -> float | None:
    """The nearest-rank 99th percentile; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(0.99 * len(ordered) + 0.5) - 1))]


def ttft_p99(sent: list[Sent]) -> float | None:
    return p99([s.ttft_s for s in sent if s.ttft_s is not None])
