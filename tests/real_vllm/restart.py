"""A real vLLM under the agent's supervisor, restarted to a new revision while requests run.

Shared by the real-vLLM test (every request must finish) and `make bench-real-vllm` (the
figures). The supervisor is the agent's own (`agents.supervisor.Supervisor`), ticked here the
way the agent's loop ticks it; the spec carries what the control plane renders for a 0.32
deployment, ``--shutdown-timeout`` from the drain timeout included.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from agents.supervisor import Supervisor
from agents.supervisor.process import TAIL_LINES
from tests.real_vllm.engine import BASE_ARGS, Install, engine_vars, post_json, stream_tokens
from tests.support.live import free_port
from tests.support.polling import wait_until

TICK_S = 0.5  # the agent's loop ticks about once a second
DEADLINE_S = 300  # only turns a hang into a failure


def spec(found: Install, workdir: Path, port: int, revision: int, drain_s: int = 30,
         extra: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"id": 1, "name": "tiny", "revision": revision, "model": str(found.model),
            "port": port, "gpu_indices": [],
            "argv": [*BASE_ARGS, *extra, "--shutdown-timeout", str(drain_s)],
            "env": engine_vars(workdir), "drain_timeout_s": drain_s}


def tick_until(sup: Supervisor, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Tick like the agent's loop until the status is ``done``; a backoff fails at once."""

    def stuck(status: dict[str, Any]) -> str:
        return (f"supervisor stuck in {status['state']}: {status['error']}\n"
                + "\n".join(status["log_tail"][-30:]))

    def check() -> dict[str, Any] | None:
        sup.tick()
        [status] = sup.status()
        if done(status):
            return status
        if status["state"] == "backing_off":
            raise AssertionError(stuck(status))
        return None

    return wait_until(check, DEADLINE_S, lambda: stuck(sup.status()[0]), every=TICK_S)


def ready(revision: int) -> Callable[[dict[str, Any]], bool]:
    return lambda s: s["state"] == "ready" and s["revision"] == revision


@dataclass
class Restart:
    start_to_ready_s: float = 0.0
    sent: int = 0
    tokens_asked: int = 0
    completed: int = 0  # all their tokens arrived
    failures: list[str] = field(default_factory=list)
    drain_s: float = 0.0  # the change to the old server's exit
    change_to_ready_s: float = 0.0  # the change to the new revision answering /health
    old_pid: int = 0
    new_status: dict[str, Any] = field(default_factory=dict)
    new_cmdline: list[str] = field(default_factory=list)  # read while it ran
    log: list[str] = field(default_factory=list)  # the supervisor's whole tail, both revisions

    @property
    def lost(self) -> int:
        return self.sent - self.completed


def _one(url: str, model: str, i: int, tokens: int, streaming: bool) -> str | None:
    """None when every token came back, else what went wrong."""
    kind = "stream" if streaming else "plain"
    try:
        if streaming:
            got = stream_tokens(url, model, f"stream {i} " + "word " * 8, tokens)
        else:
            reply = post_json(f"{url}/v1/completions", {
                "model": model, "prompt": f"plain {i} " + "word " * 8, "max_tokens": tokens,
                "ignore_eos": True}, timeout=DEADLINE_S)
            got = reply["usage"]["completion_tokens"]
    except urllib.error.HTTPError as exc:
        return f"{kind} {i}: HTTP {exc.code}"
    except OSError as exc:
        return f"{kind} {i}: {exc}"
    return None if got == tokens else f"{kind} {i}: {got} of {tokens} tokens"


def restart_under_load(found: Install, workdir: Path, requests: int = 16,
                       tokens: int = 300) -> Restart:
    """Start revision 1, put `requests` completions in flight (half streaming), change to
    revision 2, and follow the drain and the new start; the supervisor is closed after."""
    port, out = free_port(), Restart()
    sup = Supervisor([*found.command])
    try:
        started = time.monotonic()
        sup.set_desired([spec(found, workdir, port, 1)])
        tick_until(sup, ready(1))
        out.start_to_ready_s = time.monotonic() - started
        out.old_pid = sup.status()[0]["pid"]
        url, model = f"http://127.0.0.1:{port}", str(found.model)
        with ThreadPoolExecutor(requests) as pool:
            futures: list[Future] = [pool.submit(_one, url, model, i, tokens, i % 2 == 1)
                                     for i in range(requests)]
            out.sent, out.tokens_asked = requests, requests * tokens
            # The change comes once vLLM holds every request: one that reaches a draining
            # server is refused (HTTP 500), which is a load balancer's business, not a loss.
            wait_until(lambda: admitted(url) >= requests, DEADLINE_S,
                       lambda: f"vLLM never held all {requests} requests", every=0.05)
            changed = time.monotonic()
            sup.set_desired([spec(found, workdir, port, 2, extra=("--max-num-seqs", "64"))])
            tick_until(sup, lambda s: s["state"] != "draining")
            out.drain_s = time.monotonic() - changed
            out.new_status = tick_until(sup, ready(2))
            cmdline = Path(f"/proc/{out.new_status['pid']}/cmdline").read_bytes()
            out.new_cmdline = cmdline.decode().split("\0")
            out.log = sup.instances[1].tail.last(TAIL_LINES)
            out.change_to_ready_s = time.monotonic() - changed
            out.failures = [f for f in (f.result() for f in futures) if f]
        out.completed = out.sent - len(out.failures)
    finally:
        sup.close()
    return out


def admitted(url: str) -> float:
    """Requests the engine holds now, running or waiting, from its own /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text)
               if family.name in ("vllm:num_requests_running", "vllm:num_requests_waiting")
               for sample in family.samples)


def group_gone(pid: int) -> bool:
    """True when no process of the group `pid` led is left (its EngineCore, its workers)."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False
