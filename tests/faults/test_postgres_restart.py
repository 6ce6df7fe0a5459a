"""Case 2: PostgreSQL restarted while the fleet streams, first with a fast shutdown (sessions
ended, a checkpoint), then, once everything is back, with an immediate one (no checkpoint: the
start replays the WAL, as after a crash), down 15 s and 45 s (``DOWN_S``).

While it is down, ingest answers 503 with Retry-After (the agents spool) and nothing hangs;
nobody reads the API. When it is back, without restarting any process: ingest stores again,
the API answers 200 to every request sent after the start (the web process's pool does not
wait out a long reconnection back-off: settings DATABASES, ``reconnect_timeout``), the worker
runs the rollups and the alert cycles that beat keeps sending, and the spools drain: every
sample stored once. Each mode is a row of RELIABILITY.md's table.

Here ingest's own token and host lookups share the web process's pool and meet its dead
connections while the server is down; a pool nobody used during a restart, whose next request
got a dead connection, is tests/test_db_pool_reconnect.py.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from django.db import connection

from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from tests.faults.harness import Account, record
from tests.support.polling import wait_until
from tests.support.roles import user_with_role
from tests.telemetry.factories import batch

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]
# Seconds PostgreSQL stays down. After an immediate shutdown the start replays the WAL, which
# on a busy server takes minutes: long enough for a pool's reconnection attempts to be far
# apart (psycopg_pool doubles the delay after each failure: 1, 2, 4 ... 64 s).
DOWN_S = {"fast": float(os.environ.get("PITWALL_FAULT_PG_DOWN_S", 15)),
          "immediate": float(os.environ.get("PITWALL_FAULT_PG_CRASH_DOWN_S", 45))}
EVERY_S = 0.5  # the pollers' pace
API_BURST = 4  # API requests at once: the web process's pool holds at least that many
WAIT_S = 180  # only so that a broken build fails instead of hanging; never asserted on
ROLL_UP = "controlplane.telemetry.tasks.roll_up"
EVALUATE = "controlplane.alerts.tasks.evaluate_rules"


@dataclass
class Answer:
    began: float  # time.monotonic() when the request was sent
    ended: float
    status: int | str  # an HTTP status, or the name of the error when none came
    retry_after: str | None = None


class Poller:
    """One kind of request sent again and again from a thread of its own, every answer kept;
    ``burst`` of them at once each time (concurrent requests make the web process's pool hold
    that many connections). Ingest: a probe host's batches. API: the host list."""

    def __init__(self, name: str, request: Callable[[], urllib.request.Request],
                 burst: int = 1) -> None:
        self.name, self.request, self.burst = name, request, burst
        self.answers: list[Answer] = []
        self._stop, self._go, self._idle = threading.Event(), threading.Event(), threading.Event()
        self._go.set()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._go.set()
        self._thread.join(120)

    def pause(self) -> None:
        """No request from now on; returns once the last one was answered."""
        self._idle.clear()
        self._go.clear()
        self._idle.wait(120)

    def resume(self) -> None:
        self._go.set()

    def _run(self) -> None:
        with ThreadPoolExecutor(self.burst) as senders:
            while not self._stop.is_set():
                if not self._go.is_set():
                    self._idle.set()
                    self._go.wait()
                    continue
                began = time.monotonic()
                requests = [self.request() for _ in range(self.burst)]
                self.answers.extend(senders.map(self._send, requests))
                self._stop.wait(max(0.0, EVERY_S - (time.monotonic() - began)))

    @staticmethod
    def _send(request: urllib.request.Request) -> Answer:
        began = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return Answer(began, time.monotonic(), reply.status)
        except urllib.error.HTTPError as error:
            return Answer(began, time.monotonic(), error.code, error.headers.get("Retry-After"))
        except OSError as error:  # no answer at all: refused, reset, timed out
            return Answer(began, time.monotonic(), type(error).__name__)

    def between(self, start: float, end: float) -> list[Answer]:
        """The answers to requests sent at or after ``start`` and answered before ``end``."""
        return [a for a in list(self.answers) if a.began >= start and a.ended <= end]

    def first_ok_after(self, start: float) -> float | None:
        """Seconds from ``start`` until a request sent after it was answered 200."""
        ok = [a.ended for a in list(self.answers) if a.began >= start and a.status == 200]
        return min(ok) - start if ok else None


def ingest_poller(url: str) -> Poller:
    token, _ = issue_agent_token("pg-restart-probe")
    state = {"seq": 0, "boot": None}

    def request() -> urllib.request.Request:
        state["seq"] += 1
        body = batch(seq=state["seq"], boot_id=state["boot"], hostname="pg-restart-probe",
                     gpus=1)
        state["boot"] = body["agent"]["boot_id"]
        return urllib.request.Request(f"{url}/api/v1/ingest", data=orjson.dumps(body),
                                      method="POST", headers={
                                          "Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})

    return Poller("ingest", request)


def api_poller(url: str) -> Poller:
    user_with_role("pg-restart-viewer", "viewer")
    token = issue_api_token("pg-restart-viewer", name="pg-restart", scope="read")
    return Poller("api", lambda: urllib.request.Request(
        f"{url}/api/v1/hosts/", headers={"Authorization": f"Bearer {token}"}), burst=API_BURST)


def worker_ran(stack, task: str, after: int) -> bool:
    """Whether the worker's log shows a run of ``task`` that succeeded, past ``after``."""
    log = Path(stack.services["worker"].log).read_text(errors="replace")
    return any(f"{task}[" in line and "succeeded" in line
               for line in log[after:].splitlines())


def worker_log_size(stack) -> int:
    return len(Path(stack.services["worker"].log).read_text(errors="replace"))


@dataclass
class Restart:
    """What one restart did, seconds measured from the moment PostgreSQL answered again."""

    mode: str
    down_s: float  # from the shutdown signal until the server answered again
    during: list[Answer]  # ingest answers to requests sent while it was down
    spooled_peak: int
    back: dict[str, float]  # ingest, api, rollup, evaluation: seconds until each worked
    api_after: list[Answer]  # API answers to requests sent after it answered again
    ingest_after: list[Answer]
    drain_s: float

    @property
    def recovery_s(self) -> float:
        return max(self.back.values())


def restart(mode: str, private_pg, stack, fleet, ingest: Poller, api: Poller) -> Restart:
    """Shut PostgreSQL down in ``mode``, keep it down ``DOWN_S[mode]``, start it, and wait
    until ingest, the API, a rollup and an alert cycle work again and the spools are empty.
    Nobody reads the API while it is down (a quiet hour)."""
    api.pause()
    stopping = time.monotonic()
    private_pg.stop(mode)
    down_at = time.monotonic()
    spooled_peak = 0
    while time.monotonic() - stopping < DOWN_S[mode]:
        spooled_peak = max(spooled_peak, fleet.spooled())
        time.sleep(0.5)
    up_began = time.monotonic()
    private_pg.start()
    up_at = time.monotonic()
    api.resume()
    log_at = worker_log_size(stack)
    back: dict[str, float] = {}
    checks = {"ingest": lambda: ingest.first_ok_after(up_at),
              "api": lambda: api.first_ok_after(up_at),
              "rollup": lambda: worker_ran(stack, ROLL_UP, log_at),
              "evaluation": lambda: worker_ran(stack, EVALUATE, log_at)}

    def all_back() -> bool:
        for name, check in checks.items():
            if name not in back and check():
                back[name] = time.monotonic() - up_at
        return len(back) == len(checks)

    wait_until(all_back, WAIT_S, lambda: f"{mode}: back {back}; ingest "
               f"{[a.status for a in ingest.answers[-10:]]}, api "
               f"{[a.status for a in api.answers[-10:]]}\nworker:\n{stack.log('worker')[-2000:]}"
               f"\nweb:\n{stack.log('web')[-2000:]}", every=0.5)
    drain_s = fleet.wait_drained(WAIT_S)
    settled = time.monotonic()
    return Restart(mode, up_at - stopping, ingest.between(down_at, up_began), spooled_peak,
                   back, api.between(up_at, settled), ingest.between(up_at, settled), drain_s)


@dataclass
class Figures:
    """One mode's share of the fleet's account: the difference of two accounts."""

    expected: int
    stored: int
    waiting: int
    duplicated: int

    @property
    def lost(self) -> int:
        return max(0, self.expected - self.stored - self.waiting)


def since(after: Account, before: Account | None) -> Figures:
    if before is None:
        return Figures(after.expected, after.stored, after.waiting, after.duplicated)
    return Figures(after.expected - before.expected, after.stored - before.stored,
                   after.waiting, after.duplicated - before.duplicated)


def statuses(answers: list[Answer]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for answer in answers:
        counts[str(answer.status)] = counts.get(str(answer.status), 0) + 1
    return counts


def record_restart(result: Restart, figures: Figures, agents: int) -> None:
    back = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result.back.items())
    record(
        f"2. PostgreSQL restarted ({result.mode})",
        injected=f"{result.mode} shutdown (SIG{'INT' if result.mode == 'fast' else 'QUIT'} "
                 f"to the postmaster), started again",
        duration_s=result.down_s, unit="samples", expected=figures.expected,
        stored=figures.stored, lost=figures.lost, duplicated=figures.duplicated,
        recovery_s=result.recovery_s,
        notes=f"{agents} agents at 1 Hz; while down, ingest answered "
              f"{statuses(result.during)} (every 503 with Retry-After), nobody read the API "
              f"(a quiet hour); {result.spooled_peak} batches spooled at most; after the "
              f"start, working again: {back}; API answers to requests sent after the start "
              f"({API_BURST} at a time): {statuses(result.api_after)}; spools empty "
              f"{result.drain_s:.1f} s later; no process restarted; recovery: the slowest of "
              f"ingest, API, rollup and alert evaluation",
        back_s={name: round(seconds, 1) for name, seconds in result.back.items()},
        drain_s=round(result.drain_s, 1))


def test_postgresql_restarted_fast_then_immediate_recovers_without_a_restart_by_hand(
        stack, fleet, private_pg):
    # Short beat intervals: a rollup and an alert cycle within seconds of the restart.
    stack.configure(PITWALL_ROLLUP_INTERVAL_S="5", PITWALL_ALERT_EVAL_INTERVAL_S="2")
    stack.start()
    pids = {name: service.proc.pid for name, service in stack.services.items()}
    ingest, api = ingest_poller(stack.url).start(), api_poller(stack.url).start()
    results: list[tuple[Restart, Figures]] = []
    before: Account | None = None
    try:
        for mode in ("fast", "immediate"):
            fleet.start()
            fleet.wait_stored(5 if before is None else before.stored // len(fleet.agents) + 5)
            result = restart(mode, private_pg, stack, fleet, ingest, api)
            fleet.stop()
            account = fleet.account()
            figures = since(account, before)
            record_restart(result, figures, len(fleet.agents))
            results.append((result, figures))
            before = account
    finally:
        ingest.stop()
        api.stop()
        connection.close()  # this process's own, from before the restarts: the flush gets a new one

    assert not fleet.crashed()
    assert {name: service.proc.pid for name, service in stack.services.items()} == pids
    assert all(service.running() for service in stack.services.values())
    for result, figures in results:
        assert figures.lost == 0 and figures.duplicated == 0, (result.mode, figures,
                                                               before.hosts_short())
        # Down: ingest told every agent to retry later, and answered (no hang, no reset).
        assert result.during and {a.status for a in result.during} == {503}, result.during
        assert all(a.retry_after for a in result.during)
        assert result.spooled_peak > 0  # the agents kept what they could not send
        # Back: nothing answers 500 for a connection PostgreSQL closed; ingest at worst
        # asks for a retry until its writer has a connection again.
        assert result.api_after and {a.status for a in result.api_after} == {200}, (
            result.mode, statuses(result.api_after))
        assert {a.status for a in result.ingest_after} <= {200, 503}
