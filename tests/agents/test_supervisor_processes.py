"""The supervisor over real processes: simulated vLLM servers on free loopback ports."""

from __future__ import annotations

import json
import socket
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.supervisor import Supervisor
from agents.supervisor.backoff import Backoff
from tests.support.polling import wait_until

SIM = [sys.executable, "-m", "agents.sim.vllm_server", "--model"]
MODEL = "Qwen/Qwen3-8B"
# Each test starts simulated vLLM servers as processes of their own.
pytestmark = pytest.mark.slow(seconds=3)
TIMEOUT_S = 30.0  # generous: a loaded CI machine; nothing here should take a second


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def deployment(port: int, **overrides: Any) -> dict[str, Any]:
    return {"id": 1, "name": "qwen", "revision": 1, "model": MODEL, "port": port,
            "gpu_indices": [0], "argv": ["--shutdown-timeout", "20"],
            "cpus": None, "numa_node": None,
            # The simulation's own load (no flag: the agent accepts only vLLM's flags).
            "env": {"PITWALL_SIM_LOAD": "0"}, "drain_timeout_s": 20, **overrides}


@pytest.fixture
def supervisors() -> Iterator[Callable[..., Supervisor]]:
    made: list[Supervisor] = []

    def make(command: list[str] = SIM, **options: Any) -> Supervisor:
        made.append(Supervisor(command, **options))
        return made[-1]

    yield make
    for supervisor in made:
        supervisor.close()


def until(sup: Supervisor, predicate: Callable[[list[dict[str, Any]]], bool],
          timeout_s: float = TIMEOUT_S) -> list[dict[str, Any]]:
    """Tick like the agent's loop, only faster, until the status satisfies the predicate."""

    def check() -> tuple[list[dict[str, Any]]] | None:
        sup.tick()
        status = sup.status()
        return (status,) if predicate(status) else None  # an empty status may be the answer

    return wait_until(check, timeout_s, lambda: f"timed out; status: {sup.status()}",
                      every=0.05)[0]


def ready(status: list[dict[str, Any]]) -> bool:
    return bool(status) and status[0]["state"] == "ready"


def proc(pid: int, name: str) -> str:
    return Path(f"/proc/{pid}/{name}").read_text()


def status_field(text: str, field: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in text.splitlines()
                if line.startswith(field + ":"))


def http(method: str, url: str, body: dict[str, Any] | None = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"},
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            reply.read()
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_sim_vllm_starts_and_becomes_ready(supervisors):
    sup, port = supervisors(), free_port()
    sup.set_desired([deployment(port)])
    (status,) = until(sup, ready)
    assert status["pid"] and status["restarts"] == 0
    assert status["argv"][len(SIM):len(SIM) + 3] == [MODEL, "--port", str(port)]
    assert http("GET", f"http://127.0.0.1:{port}/health") == 200


def test_the_log_tail_shows_the_startup_line_and_the_ignored_flags(supervisors):
    sup, port = supervisors(), free_port()
    sup.set_desired([deployment(port, argv=["--enforce-eager"])])
    until(sup, lambda s: ready(s) and any("ignored" in line for line in s[0]["log_tail"]))
    tail = sup.status()[0]["log_tail"]
    assert any(f"{MODEL} on http://127.0.0.1:{port}" in line for line in tail)
    assert any(line.endswith("ignored: --enforce-eager") for line in tail)


def test_the_gpus_and_the_cpus_are_visible_in_proc(supervisors):
    sup, port = supervisors(), free_port()
    sup.set_desired([deployment(port, gpu_indices=[2, 3], cpus=[0],
                                env={"VLLM_LOGGING_LEVEL": "DEBUG", "PITWALL_SIM_LOAD": "0"})])
    (status,) = until(sup, ready)
    pid = status["pid"]
    environ = proc(pid, "environ").split("\0")
    assert "CUDA_VISIBLE_DEVICES=2,3" in environ and "VLLM_LOGGING_LEVEL=DEBUG" in environ
    # Every thread, not only the main one: the binding happened before exec.
    for task in Path(f"/proc/{pid}/task").iterdir():
        assert status_field((task / "status").read_text(), "Cpus_allowed_list") == "0"


def test_the_agents_token_is_not_in_vllms_environment(supervisors, monkeypatch):
    token = "pwa_not-for-vllm"
    monkeypatch.setenv("PITWALL_TOKEN", token)
    monkeypatch.setenv("PITWALL_TOKEN_FILE", "/etc/pitwall-agent/token")
    monkeypatch.setenv("AGENT_TOKEN_COPY", token)
    sup, port = supervisors(secrets=(token,)), free_port()
    sup.set_desired([deployment(port)])
    (status,) = until(sup, ready)
    environ = proc(status["pid"], "environ")
    assert token not in environ and "PITWALL_TOKEN" not in environ
    assert "PITWALL_SIM_LOAD=0" in environ.split("\0")


def test_a_process_that_exits_at_once_is_restarted_with_growing_backoff(supervisors):
    crash = [sys.executable, "-c", "import sys; print('boom', flush=True); sys.exit(3)"]
    sup = supervisors(crash, new_backoff=lambda: Backoff(base_s=0.1))
    sup.set_desired([deployment(free_port())])
    delays: dict[int, float] = {}

    def third_restart(status: list[dict[str, Any]]) -> bool:
        s = status[0]
        if s["state"] == "backing_off":
            delays[s["restarts"]] = s["next_start_at"] - s["since"]
        return s["restarts"] >= 3

    until(sup, third_restart)
    assert delays[0] < delays[1] < delays[2]
    status = until(sup, lambda s: s[0]["state"] == "backing_off")[0]
    assert status["exit_code"] == 3 and status["error"] == "exited with code 3"
    assert "boom" in status["log_tail"]


def test_a_revision_change_drains_the_running_request_then_runs_the_new_flags(supervisors):
    sup, port = supervisors(), free_port()
    base = f"http://127.0.0.1:{port}"
    sup.set_desired([deployment(port)])
    old_pid = until(sup, ready)[0]["pid"]
    answers: list[int] = []
    # About 2.5 simulated-GPU seconds of decoding: still running when the drain begins.
    request = threading.Thread(target=lambda: answers.append(http(
        "POST", f"{base}/v1/completions", {"model": MODEL, "prompt": "a lap",
                                           "max_tokens": 300})))
    request.start()
    until(sup, lambda s: _running(base) >= 1)
    sup.set_desired([deployment(port, revision=2, argv=["--max-num-seqs", "8",
                                                        "--shutdown-timeout", "20"])])
    draining = until(sup, lambda s: s[0]["state"] == "draining")[0]
    # The server takes its SIGTERM a moment after the supervisor sends it; then, as vLLM 0.32,
    # it still says healthy and refuses new completions with a 500.
    until(sup, lambda s: http("POST", f"{base}/v1/completions",
                              {"model": MODEL, "prompt": "x", "max_tokens": 1}) == 500)
    health = http("GET", f"{base}/health")
    new = until(sup, lambda s: ready(s) and s[0]["revision"] == 2)[0]
    request.join(TIMEOUT_S)
    assert draining["pid"] == old_pid and health == 200
    assert answers == [200]
    assert new["pid"] != old_pid and new["exit_code"] is None
    cmdline = proc(new["pid"], "cmdline").split("\0")
    assert cmdline[cmdline.index("--max-num-seqs") + 1] == "8"


def _running(base: str) -> int:
    with urllib.request.urlopen(f"{base}/sim/state", timeout=10) as reply:
        return json.loads(reply.read())["requests_running"]


def test_a_removed_deployment_is_stopped_with_its_whole_process_group(supervisors):
    # A shell leaves a child behind, as vLLM leaves its engine and worker processes.
    forking = ["sh", "-c", 'sleep 300 & exec "$0" "$@"', *SIM]
    sup, port = supervisors(forking), free_port()
    sup.set_desired([deployment(port)])
    pid = until(sup, ready)[0]["pid"]
    sup.set_desired([])
    assert len(living_in_group(pid)) == 2  # the simulated server and the sleep
    # The leftover sleep gets SIGKILL once the server has drained and exited; a signal lands
    # asynchronously, so the group is gone a moment after the instance is.
    until(sup, lambda s: s == [] and living_in_group(pid) == [])


def living_in_group(pgid: int) -> list[int]:
    """Processes of the group that have not exited (zombies wait for init, they are gone)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while we looked
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def test_a_child_that_prints_a_lot_is_never_blocked_by_its_pipe(supervisors):
    chatty = [sys.executable, "-c", "for i in range(200_000): print(i)"]
    sup = supervisors(chatty)
    sup.set_desired([deployment(free_port())])
    status = until(sup, lambda s: s[0]["exit_code"] == 0)[0]
    assert len(status["log_tail"]) == 50
    assert "199999" in status["log_tail"]


def test_binding_to_a_cpu_the_host_lacks_is_a_crash_that_says_why(supervisors):
    sup = supervisors()
    sup.set_desired([deployment(free_port(), cpus=[4095])])
    status = until(sup, lambda s: s[0]["state"] == "crashed")[0]
    assert "cannot bind to CPUs [4095]" in status["error"]
