"""The router supervisor over real processes: vllm-router 0.1.17 (the `router` extra) in front
of simulated vLLM servers, all on free loopback ports."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agents.router import admin
from agents.router.placeholder import Placeholders
from agents.router.supervisor import (
    RETRY_MAX_BACKOFF_MS,
    RouterProcess,
    RouterSupervisor,
    default_command,
    hold_retries,
    router_argv,
)
from agents.supervisor.backoff import Backoff
from agents.supervisor.health import http_health
from tests.support.polling import wait_until

MODEL = "m"
TIMEOUT_S = 30.0  # generous: a loaded CI machine; each wait here takes about a second
pytestmark = pytest.mark.slow(seconds=3)
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> str:
    with _OPENER.open(url, timeout=10) as reply:
        return reply.read().decode()


def complete(port: int, max_tokens: int = 2) -> int:
    body = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": max_tokens}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    with _OPENER.open(request, timeout=30) as reply:
        reply.read()
        return reply.status


def finished_requests(worker: str) -> int:
    """What the worker itself says it served (vLLM's own counter, not the router's)."""
    page = get(f"{worker}/metrics")
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
                   if line.startswith("vllm:request_success_total{")))


def attempt(port: int, max_tokens: int) -> str:
    """"200", or what the client saw instead."""
    try:
        return str(complete(port, max_tokens))
    except urllib.error.HTTPError as refused:
        return f"HTTP {refused.code}: {refused.read()[:200]!r}"
    except OSError as failed:
        return f"failed: {failed}"


def start_workers(count: int) -> tuple[list[str], list[subprocess.Popen]]:
    """Simulated vLLM servers on free ports, each healthy before this returns."""
    ports = [free_port() for _ in range(count)]
    procs = [subprocess.Popen([sys.executable, "-m", "agents.sim.vllm_server", "--port",
                               str(port), "--model", MODEL, "--load", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for port in ports]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    for url, proc in zip(urls, procs, strict=True):
        wait_until(lambda u=url, p=proc: _healthy(u, p), TIMEOUT_S,
                   lambda u=url: f"{u} never became healthy")
    return urls, procs


@pytest.fixture(scope="module")
def workers() -> Iterator[list[str]]:
    """Two simulated vLLM servers, shared by the module's tests (none of them stops one)."""
    urls, procs = start_workers(2)
    try:
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=TIMEOUT_S)


def _healthy(url: str, proc: subprocess.Popen) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"{url} exited with {proc.returncode}")
    try:
        return get(f"{url}/health") is not None
    except OSError:
        return False


@pytest.fixture
def supervisors() -> Iterator[Callable[..., RouterSupervisor]]:
    made: list[RouterSupervisor] = []

    def make(**options: Any) -> RouterSupervisor:
        options.setdefault("new_backoff", lambda: Backoff(base_s=0.05, jitter=0.0))
        made.append(RouterSupervisor(**options))
        return made[-1]

    yield make
    for supervisor in made:
        supervisor.close()


def desired(port: int, workers: list[str], policy: str = "round_robin",
            service_id: int = 3, hold_s: int = 0) -> dict[str, Any]:
    spec = {"service_id": service_id, "service": "llama", "port": port, "policy": policy,
            "workers": workers, "model": MODEL}
    return {**spec, "hold_s": hold_s} if hold_s else spec  # as the control plane sends it


def until(sup: RouterSupervisor, predicate: Callable[[list[dict[str, Any]]], bool],
          timeout_s: float = TIMEOUT_S) -> list[dict[str, Any]]:
    """Tick like the agent's loop, only faster, until the status satisfies the predicate."""

    def check() -> tuple[list[dict[str, Any]]] | None:
        sup.tick()
        status = sup.status()
        return (status,) if predicate(status) else None

    return wait_until(check, timeout_s, lambda: f"timed out; status: {sup.status()}",
                      every=0.05)[0]


def ready_with(workers: list[str]) -> Callable[[list[dict[str, Any]]], bool]:
    """Up, and listing these workers (in any order: power_of_two keeps its own)."""
    return lambda s: (bool(s) and s[0]["state"] == "ready"
                      and sorted(s[0]["workers"]) == sorted(workers))


def argv(sup: RouterSupervisor, service_id: int = 3) -> list[str]:
    """The command line the router was started with (it renames its process: /proc shows
    "vllm::router")."""
    return sup.routers[service_id].instance.argv


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def router_list(port: int) -> list[str]:
    return [w.url for w in admin.workers(port)]


def test_the_router_program_is_the_installed_one():
    assert Path(default_command()[0]).name == "vllm-router"
    assert os.access(default_command()[0], os.X_OK)


def test_a_power_of_two_router_starts_with_no_replica_and_takes_them_live(supervisors,
                                                                           workers):
    """The router refuses to start power_of_two with fewer than two workers; the agent's
    stand-ins let it, and are gone the moment it is up."""
    sup, port = supervisors(), free_port()
    sup.set_desired([desired(port, [], policy="power_of_two")])
    (status,) = until(sup, ready_with([]))
    assert router_list(port) == []
    pid = status["pid"]
    assert flag(argv(sup), "--policy") == "power_of_two"

    sup.set_desired([desired(port, workers, policy="power_of_two")])
    sup.tick()
    assert sorted(router_list(port)) == sorted(workers)
    (status,) = sup.status()
    assert status["pid"] == pid and status["state"] == "ready"  # applied live, no restart
    assert sorted(status["workers"]) == sorted(workers)


def test_completions_reach_both_workers_and_the_status_counts_them(supervisors, workers):
    sup, port = supervisors(), free_port()
    sup.set_desired([desired(port, workers)])
    until(sup, ready_with(workers))
    before = [finished_requests(w) for w in workers]
    assert all(complete(port) == 200 for _ in range(6))
    after = [finished_requests(w) for w in workers]
    assert [a - b for a, b in zip(after, before, strict=True)] == [3, 3]  # round robin

    sup.routers[3].metrics_at = float("-inf")  # scrape on the next tick, not in 5 s
    (status,) = until(sup, lambda s: s[0]["metrics"]["requests_total"] == 6)
    assert status["metrics"]["per_worker"] == {
        w: {"processed": 3, "running": 0, "healthy": 1} for w in workers}


def test_power_of_twos_counts_come_from_the_outcomes(supervisors, workers):
    sup, port = supervisors(), free_port()
    sup.set_desired([desired(port, workers, policy="power_of_two")])
    until(sup, ready_with(workers))
    assert all(complete(port) == 200 for _ in range(8))
    sup.routers[3].metrics_at = float("-inf")
    (status,) = until(sup, lambda s: s[0]["metrics"]["requests_total"] == 8)
    assert sum(w["processed"] for w in status["metrics"]["per_worker"].values()) == 8


def test_a_removed_worker_is_out_of_the_router_after_one_tick(supervisors, workers):
    sup, port = supervisors(), free_port()
    sup.set_desired([desired(port, workers)])
    (status,) = until(sup, ready_with(workers))
    kept, removed = workers

    sup.set_desired([desired(port, [kept])])
    sup.tick()
    assert router_list(port) == [kept]
    assert sup.status()[0]["workers"] == [kept]
    assert sup.status()[0]["pid"] == status["pid"]
    before = finished_requests(kept), finished_requests(removed)
    assert all(complete(port) == 200 for _ in range(5))
    assert (finished_requests(kept), finished_requests(removed)) == (before[0] + 5, before[1])


def test_removals_go_out_before_the_routers_are_probed(supervisors, workers, monkeypatch):
    """A tick's first calls are the removals: the probe of every router comes after. The
    probe and the removal are the real ones, noted on their way."""
    calls: list[str] = []
    real_probe, real_remove = http_health, admin.remove_worker

    def probe(port: int) -> bool:
        calls.append("probe")
        return real_probe(port)

    def remove(router_port: int, url: str, timeout_s: float = 5.0) -> None:
        calls.append(f"remove {url}")
        real_remove(router_port, url, timeout_s)

    sup, port = supervisors(probe=probe), free_port()
    sup.set_desired([desired(port, workers)])
    until(sup, ready_with(workers))
    sup.set_desired([desired(port, workers[:1])])
    calls.clear()
    monkeypatch.setattr(admin, "remove_worker", remove)
    sup.tick()
    assert calls[0] == f"remove {workers[1]}" and "probe" in calls[1:]
    assert router_list(port) == workers[:1]


def test_requests_a_killed_worker_held_or_was_sent_are_served_by_the_live_one(supervisors,
                                                                             workers):
    """A replica's host dies under load, before the control plane can know. power_of_two
    prefers the dead worker (it holds no request any more), so with the router's default
    circuit breaker (10 failures) the tries of two requests it held all went to it and both
    failed; with the agent's (3 failures) the fourth try goes to the live one."""
    (victim,), (process,) = start_workers(1)
    try:
        sup, port = supervisors(), free_port()
        sup.set_desired([desired(port, [workers[0], victim], policy="power_of_two")])
        until(sup, ready_with([workers[0], victim]))
        with ThreadPoolExecutor(16) as pool:
            held = [pool.submit(attempt, port, 64) for _ in range(4)]
            wait_until(lambda: _holding(victim), TIMEOUT_S, lambda: f"{victim} got none")
            process.kill()
            seen = [f.result() for f in held]
            seen += [attempt(port, 4) for _ in range(8)]
    finally:
        process.kill()
        process.wait(timeout=TIMEOUT_S)
    assert [s for s in seen if s != "200"] == []


def _holding(worker: str) -> int:
    state = json.loads(get(f"{worker}/sim/state"))
    return state["requests_running"] + state["requests_waiting"]


def test_a_killed_router_is_restarted_and_its_workers_applied_again(supervisors, workers):
    sup, port = supervisors(), free_port()
    sup.set_desired([desired(port, workers)])
    (status,) = until(sup, ready_with(workers))
    os.kill(status["pid"], signal.SIGKILL)

    (restarted,) = until(sup, lambda s: s[0]["state"] == "ready" and s[0]["pid"] not in (
        None, status["pid"]) and sorted(s[0]["workers"]) == sorted(workers))
    assert sorted(router_list(port)) == sorted(workers)
    assert complete(port) == 200
    assert any("exited with code -9" in line for line in restarted["log_tail"])
    assert sup.routers[3].instance.restarts == 1


def test_a_changed_policy_restarts_the_router_with_its_workers(supervisors, workers):
    sup, port = supervisors(), free_port()
    sup.set_desired([desired(port, workers)])
    (status,) = until(sup, ready_with(workers))

    sup.set_desired([desired(port, workers, policy="random")])
    (restarted,) = until(sup, lambda s: s[0]["state"] == "ready" and s[0]["pid"] not in (
        None, status["pid"]) and sorted(s[0]["workers"]) == sorted(workers))
    assert flag(argv(sup), "--policy") == "random"
    assert any("draining revision 1" in line for line in restarted["log_tail"])
    assert any("revision 2 started" in line for line in restarted["log_tail"])
    wait_until(lambda: not Path(f"/proc/{status['pid']}").exists(), TIMEOUT_S)


def test_a_changed_port_moves_the_router(supervisors, workers):
    sup, port, moved = supervisors(), free_port(), free_port()
    sup.set_desired([desired(port, workers)])
    until(sup, ready_with(workers))
    sup.set_desired([desired(moved, workers)])
    (status,) = until(sup, lambda s: s[0]["state"] == "ready" and s[0]["port"] == moved
                      and sorted(s[0]["workers"]) == sorted(workers))
    assert complete(moved) == 200
    with pytest.raises(OSError):
        complete(port)


def test_a_worker_list_that_drifted_is_put_right_on_the_next_tick(supervisors, workers):
    sup, port = supervisors(), free_port()
    sup.set_desired([desired(port, workers)])
    until(sup, ready_with(workers))
    admin.remove_worker(port, workers[0])  # someone else, behind the agent's back
    stranger = Placeholders()  # a server that answers /health, as the router asks of a worker
    try:
        admin.add_worker(port, stranger.urls()[0])  # not the service's: taken out again
    finally:
        stranger.close()
    sup.tick()
    assert sorted(router_list(port)) == sorted(workers)
    assert sup.status()[0]["error"] == ""


def test_a_removed_router_stops_and_leaves_the_report(supervisors, workers):
    sup, port = supervisors(), free_port()
    sup.set_desired([desired(port, workers)])
    (status,) = until(sup, ready_with(workers))
    sup.set_desired([])
    assert sup.status() == []  # while it drains: its service may be routed elsewhere now
    wait_until(lambda: sup.tick() or not sup.routers, TIMEOUT_S,
               lambda: f"still there: {sup.routers}", every=0.05)
    wait_until(lambda: not Path(f"/proc/{status['pid']}").exists(), TIMEOUT_S)
    with pytest.raises(admin.RouterAdminError, match="Connection refused"):
        admin.workers(port, timeout_s=1.0)


def test_the_status_has_the_contracts_shape(supervisors, workers):
    sup, port = supervisors(), free_port()
    sup.set_desired([desired(port, workers)])
    (status,) = until(sup, ready_with(workers))
    assert set(status) == {"service_id", "state", "pid", "port", "workers", "healthy",
                           "error", "log_tail", "metrics", "at"}
    assert status["service_id"] == 3 and status["port"] == port and status["healthy"] is True
    assert status["error"] == "" and isinstance(status["at"], float)
    assert set(status["metrics"]) == {"requests_total", "per_worker", "no_worker_tries"}
    assert set(status["metrics"]["per_worker"]) == set(workers)
    assert 0 < len(status["log_tail"]) <= 50
    assert not any("\x1b" in line for line in status["log_tail"])  # the router's colours
    started = argv(sup)
    assert flag(started, "--host") == "0.0.0.0" and flag(started, "--port") == str(port)
    assert flag(started, "--prometheus-host") == "127.0.0.1"
    assert "--disable-retries" not in started


def test_the_agents_token_is_not_in_the_routers_environment(supervisors, workers,
                                                            monkeypatch):
    monkeypatch.setenv("PITWALL_TOKEN", "pwa_secret")
    monkeypatch.setenv("SOME_HELPER", "Bearer pwa_secret")
    sup, port = supervisors(secrets=("pwa_secret",)), free_port()
    sup.set_desired([desired(port, workers)])
    (status,) = until(sup, ready_with(workers))
    environ = Path(f"/proc/{status['pid']}/environ").read_bytes()
    assert b"pwa_secret" not in environ


def test_a_router_program_that_is_not_there_is_a_crash_that_says_why(supervisors):
    sup, port = supervisors(command=["/nonexistent/vllm-router"]), free_port()
    sup.set_desired([desired(port, [])])
    (status,) = until(sup, lambda s: s[0]["state"] in ("crashed", "backing_off"))
    assert re.search(r"could not start: .*No such file", status["error"])
    assert status["workers"] == [] and status["healthy"] is False


def test_a_router_that_never_answers_is_given_up_after_the_startup_timeout(supervisors):
    """A process that runs but never serves /health (here: sleep) is killed and restarted."""
    sup = supervisors(command=[sys.executable, "-c", "import time; time.sleep(600)", "--"],
                      startup_timeout_s=0.5)
    sup.set_desired([desired(free_port(), [])])
    (status,) = until(sup, lambda s: s[0]["state"] in ("crashed", "backing_off"))
    assert "not healthy 0.5 s after start" in status["error"]


# -- holding requests while a service has no replica (min_replicas 0) ----------------------


def test_a_router_without_a_hold_is_started_as_before():
    """No retry flag at all: the router's own 5 tries, as every router before scale to zero."""
    assert router_argv(["vllm-router"], RouterProcess(3, 1, 9000, "round_robin"), [],
                       9100) == [
        "vllm-router", "--host", "0.0.0.0", "--port", "9000", "--policy", "round_robin",
        "--cb-failure-threshold", "3", "--cb-timeout-duration-secs", "10", "--worker-urls",
        "--prometheus-port", "9100", "--prometheus-host", "127.0.0.1", "--log-level",
        "warning", "--worker-startup-timeout-secs", "2", "--worker-startup-check-interval",
        "1", "--health-check-timeout-secs", "2"]


def test_a_hold_is_a_retry_budget_whose_backoffs_add_up_to_it():
    started = router_argv(["vllm-router"], RouterProcess(3, 1, 9000, "round_robin", 300), [],
                          9100)
    assert flag(started, "--retry-max-retries") == str(hold_retries(300))
    assert flag(started, "--retry-initial-backoff-ms") == "50"  # the router's own first ones
    assert flag(started, "--retry-backoff-multiplier") == "1.5"
    assert flag(started, "--retry-max-backoff-ms") == str(RETRY_MAX_BACKOFF_MS)

    def held_s(tries: int) -> float:  # the backoffs between that many tries, no jitter
        return sum(min(0.05 * 1.5 ** k, RETRY_MAX_BACKOFF_MS / 1000) for k in range(tries - 1))

    for hold in (30, 120, 300, 600):
        assert held_s(hold_retries(hold) - 1) < hold <= held_s(hold_retries(hold))
    assert hold_retries(300) == 159  # 5.7 s of growing backoffs, then 2 s each


def test_without_a_hold_a_request_with_no_worker_is_refused_at_once(supervisors):
    sup, port = supervisors(), free_port()
    sup.set_desired([desired(port, [])])
    until(sup, ready_with([]))
    started = time.monotonic()
    assert attempt(port, 2).startswith("HTTP 503")
    assert time.monotonic() - started < 3.0  # measured 0.45 s: 5 tries, 50 ms backoff x1.5


def test_with_a_hold_a_request_waits_for_the_first_worker_and_is_answered(supervisors,
                                                                         workers):
    """The request is sent to a router with no worker, waits in its retries (counted as tries
    that found no worker, which the status reports at once) and is answered by the worker
    added seconds later. Changing the hold restarts the router with the new budget."""
    sup, port = supervisors(), free_port()
    sup.set_desired([desired(port, [], hold_s=60)])
    (status,) = until(sup, ready_with([]))
    assert flag(argv(sup), "--retry-max-retries") == str(hold_retries(60))
    answers: list[str] = []
    sent = time.monotonic()
    client = threading.Thread(target=lambda: answers.append(attempt(port, 2)), daemon=True)
    client.start()
    until(sup, lambda s: s[0]["metrics"]["no_worker_tries"] >= 2)  # read every tick
    time.sleep(max(0.0, 3.0 - (time.monotonic() - sent)))
    assert answers == []  # still held

    sup.set_desired([desired(port, workers[:1], hold_s=60)])
    until(sup, ready_with(workers[:1]))
    client.join(TIMEOUT_S)
    waited_s = time.monotonic() - sent
    assert answers == ["200"] and 3.0 <= waited_s < 3.0 + TIMEOUT_S, (answers, waited_s)

    pid = sup.status()[0]["pid"]
    sup.set_desired([desired(port, workers[:1])])  # min_replicas no longer 0: no hold
    (status,) = until(sup, lambda s: ready_with(workers[:1])(s) and s[0]["pid"] != pid)
    assert "--retry-max-retries" not in argv(sup)
