"""The supervisor's logic with a fake clock, probe and processes: backoff, plans, states."""

from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import Any

import pytest

from agents.supervisor import SpecError, Supervisor
from agents.supervisor.backoff import Backoff
from agents.supervisor.instance import EXIT_GRACE_S
from agents.supervisor.launch import LaunchPlan, plan_launch
from agents.supervisor.process import LogTail
from agents.supervisor.spec import DeploymentSpec, parse_specs

STATUS_KEYS = {"id", "revision", "state", "since", "pid", "restarts", "next_start_at",
               "exit_code", "error", "argv", "log_tail", "warnings", "phases"}


def deployment(**overrides: Any) -> dict[str, Any]:
    return {"id": 12, "name": "llama-8b", "revision": 4,
            "model": "meta-llama/Llama-3.1-8B-Instruct", "port": 8000, "gpu_indices": [0, 1],
            "args": {"max_num_seqs": 256, "tensor_parallel_size": 2},
            "argv": ["--max-num-seqs", "256", "--tensor-parallel-size", "2"],
            "cpus": None, "numa_node": None, "env": {"VLLM_LOGGING_LEVEL": "INFO"},
            "drain_timeout_s": 30, **overrides}


TERM_LEADER = ("leader", signal.SIGTERM)
KILL_GROUP = ("group", signal.SIGKILL)


class FakeProcess:
    """Exits when told to, or on SIGKILL; SIGTERM exits it only if `obeys_sigterm`.
    `signals` records (to whom, signal): the leader alone, or its whole group."""

    def __init__(self, pid: int, obeys_sigterm: bool = True) -> None:
        self.pid, self.obeys_sigterm = pid, obeys_sigterm
        self.code: int | None = None
        self.signals: list[tuple[str, int]] = []

    def poll(self) -> int | None:
        return self.code

    def signal_leader(self, signum: int) -> None:
        self._receive("leader", signum)

    def signal_group(self, signum: int) -> None:
        self._receive("group", signum)

    def _receive(self, whom: str, signum: int) -> None:
        self.signals.append((whom, signum))
        if self.code is None and signum == signal.SIGKILL:
            self.code = -signal.SIGKILL
        elif self.code is None and signum == signal.SIGTERM and self.obeys_sigterm:
            self.code = 0


class Host:
    """A supervisor over fake processes, a settable clock and a probe of healthy ports."""

    def __init__(self, **options: Any) -> None:
        self.now = 1000.0
        self.healthy: set[int] = set()
        self.plans: list[LaunchPlan] = []
        self.processes: list[FakeProcess] = []
        self.obeys_sigterm = True
        self.fail_spawn: Exception | None = None
        self.sup = Supervisor(["vllm", "serve"], clock=lambda: self.now,
                              probe=lambda port: port in self.healthy, spawn=self._spawn,
                              new_backoff=lambda: Backoff(jitter=0.0), **options)

    def _spawn(self, plan: LaunchPlan, tail: LogTail) -> FakeProcess:
        if self.fail_spawn is not None:
            raise self.fail_spawn
        self.plans.append(plan)
        self.processes.append(FakeProcess(100 + len(self.processes), self.obeys_sigterm))
        return self.processes[-1]

    def tick(self, after_s: float = 1.0) -> dict[str, Any]:
        self.now += after_s
        self.sup.tick(self.now)
        return self.status()

    def status(self) -> dict[str, Any]:
        (only,) = self.sup.status()
        return only

    def run_ready(self, spec: dict[str, Any] | None = None) -> dict[str, Any]:
        self.sup.set_desired([spec or deployment()])
        self.healthy.add((spec or deployment())["port"])
        self.tick()
        return self.tick()


# --- backoff -------------------------------------------------------------------------------

def test_backoff_doubles_from_one_second_and_stops_at_five_minutes():
    backoff = Backoff(jitter=0.0)
    assert [backoff.next_delay() for _ in range(11)] == [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]


def test_jitter_only_shortens_a_delay_so_the_delays_still_grow():
    backoff = Backoff(rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(9)]
    assert all(0.75 * 2 ** i <= d <= 2 ** i for i, d in enumerate(delays))
    assert delays == sorted(delays)


def test_a_reset_backoff_starts_again_from_one_second():
    backoff = Backoff(jitter=0.0)
    backoff.next_delay(), backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() == 1


# --- spec and launch plan ------------------------------------------------------------------

def test_the_command_line_is_vllm_serve_model_port_then_the_rendered_flags():
    spec = DeploymentSpec.from_dict(deployment())
    assert spec.command_line(["vllm", "serve"]) == [
        "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000",
        "--max-num-seqs", "256", "--tensor-parallel-size", "2"]


@pytest.mark.parametrize("bad", [{"port": "8000"}, {"port": 70000}, {"gpu_indices": [-1]},
                                 {"argv": ["--x", 1]}, {"env": {"A": 1}}, {"model": ""},
                                 {"revision": True}, {"drain_timeout_s": -1}])
def test_a_malformed_deployment_is_refused_with_its_id(bad):
    with pytest.raises(SpecError, match="deployment 12"):
        DeploymentSpec.from_dict(deployment(**bad))


def test_a_deployment_listed_twice_is_refused():
    with pytest.raises(SpecError, match="twice"):
        parse_specs([deployment(), deployment()])


def test_the_environment_names_the_gpus_and_the_gpus_win_over_the_specs_env():
    spec = DeploymentSpec.from_dict(deployment(env={"CUDA_VISIBLE_DEVICES": "7", "A": "b"}))
    env = plan_launch(spec, ["vllm", "serve"], base_env={"PATH": "/bin"}).env
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["A"] == "b" and env["PATH"] == "/bin"


def sysfs(tmp_path: Path, node: int, cpulist: str) -> str:
    node_dir = tmp_path / "devices/system/node" / f"node{node}"
    node_dir.mkdir(parents=True)
    (node_dir / "cpulist").write_text(cpulist + "\n")
    return str(tmp_path)


def test_explicit_cpus_are_bound_as_given_even_with_a_numa_node(tmp_path):
    spec = DeploymentSpec.from_dict(deployment(cpus=[2, 3], numa_node=1))
    plan = plan_launch(spec, ["vllm", "serve"], sys_root=sysfs(tmp_path, 1, "8-15"),
                       which=lambda _: "/usr/bin/numactl")
    assert (plan.cpus, plan.argv[:2], plan.warnings) == ([2, 3], ["vllm", "serve"], [])


def test_a_numa_node_binds_its_cpus_from_sysfs_and_its_memory_with_numactl(tmp_path):
    spec = DeploymentSpec.from_dict(deployment(numa_node=1))
    plan = plan_launch(spec, ["vllm", "serve"], sys_root=sysfs(tmp_path, 1, "8-11,24"),
                       which=lambda _: "/usr/bin/numactl")
    assert plan.cpus == [8, 9, 10, 11, 24]
    assert plan.argv[:4] == ["/usr/bin/numactl", "--membind=1", "vllm", "serve"]
    assert plan.warnings == []


def test_without_numactl_a_numa_node_binds_cpus_only_and_says_so(tmp_path):
    spec = DeploymentSpec.from_dict(deployment(numa_node=0))
    plan = plan_launch(spec, ["vllm", "serve"], sys_root=sysfs(tmp_path, 0, "0-3"),
                       which=lambda _: None)
    assert plan.cpus == [0, 1, 2, 3] and plan.argv[0] == "vllm"
    assert plan.warnings == ["numactl is not installed: CPUs bound to NUMA node 0, memory not"]


def test_numactl_binds_a_node_that_sysfs_does_not_list(tmp_path):
    spec = DeploymentSpec.from_dict(deployment(numa_node=3))
    plan = plan_launch(spec, ["vllm", "serve"], sys_root=str(tmp_path),
                       which=lambda _: "/usr/bin/numactl")
    assert plan.cpus is None
    assert plan.argv[:3] == ["/usr/bin/numactl", "--cpunodebind=3", "--membind=3"]


def test_an_unknown_numa_node_without_numactl_starts_unbound_with_a_warning(tmp_path):
    spec = DeploymentSpec.from_dict(deployment(numa_node=3))
    plan = plan_launch(spec, ["vllm", "serve"], sys_root=str(tmp_path), which=lambda _: None)
    assert plan.cpus is None and plan.argv[0] == "vllm"
    assert "started unbound" in plan.warnings[0]


# --- the state machine ---------------------------------------------------------------------

def test_a_new_deployment_starts_then_becomes_ready_when_health_answers():
    host = Host()
    host.sup.set_desired([deployment()])
    starting = host.tick()
    host.healthy.add(8000)
    ready = host.tick()
    assert (starting["state"], ready["state"]) == ("starting", "ready")
    assert ready["pid"] == 100 and ready["since"] == host.now
    assert host.plans[0].argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]


def test_status_has_exactly_the_documented_keys():
    host = Host()
    assert set(host.run_ready()) == STATUS_KEYS


def test_a_crash_backs_off_then_restarts_with_growing_delays():
    host = Host()
    host.run_ready()
    delays = []
    for _ in range(3):
        host.processes[-1].code = 1
        crashed = host.tick()
        backing_off = host.tick(0.0)
        delays.append(backing_off["next_start_at"] - host.now)
        host.tick(delays[-1])
    assert crashed["state"] == "crashed" and crashed["error"] == "exited with code 1"
    assert backing_off["state"] == "backing_off" and backing_off["exit_code"] == 1
    assert delays == [1, 2, 4]
    assert host.status()["state"] == "starting" and host.status()["restarts"] == 3


def test_ten_minutes_of_ready_resets_the_backoff():
    host = Host()
    host.run_ready()
    host.processes[-1].code = 1
    host.tick(), host.tick(0.0), host.tick(1.0)  # crashed, backing off 1 s, restarted
    host.tick()  # ready again
    host.tick(600.0)  # still healthy after ten minutes
    host.processes[-1].code = 1
    host.tick()
    assert host.tick(0.0)["next_start_at"] - host.now == 1


def test_a_ready_instance_failing_health_three_times_in_a_row_is_killed_and_restarted():
    host = Host()
    host.run_ready()
    host.healthy.clear()
    states = [host.tick()["state"] for _ in range(3)]
    assert states == ["ready", "ready", "crashed"]
    assert host.processes[0].signals == [KILL_GROUP]
    assert host.status()["error"] == "/health failed 3 times in a row"
    assert host.tick()["state"] == "backing_off"


def test_one_good_probe_clears_the_count_of_failed_ones():
    host = Host()
    host.run_ready()
    for healthy in (False, False, True, False, False):
        host.healthy = {8000} if healthy else set()
        host.tick()
    assert host.status()["state"] == "ready"


def test_an_instance_never_healthy_within_the_startup_timeout_is_killed():
    host = Host(startup_timeout_s=60.0)
    host.sup.set_desired([deployment()])
    host.tick()
    assert host.tick(59.0)["state"] == "starting"
    assert host.tick(1.0)["state"] == "crashed"
    assert host.processes[0].signals == [KILL_GROUP]


def test_a_new_revision_drains_the_old_process_then_starts_the_new_one():
    host = Host()
    host.run_ready()
    host.obeys_sigterm = host.processes[0].obeys_sigterm = False
    host.sup.set_desired([deployment(revision=5, argv=["--max-num-seqs", "64"])])
    draining = host.tick()
    still = host.tick(28.0)
    signals = list(host.processes[0].signals)
    host.processes[0].code = 0  # finished its requests and exited
    started = host.tick()
    assert (draining["state"], draining["revision"]) == ("draining", 4)
    # vLLM's API server alone: a SIGTERM to the EngineCore would abort the running requests.
    assert still["state"] == "draining" and signals == [TERM_LEADER]
    # Once the leader is gone, SIGKILL reaches any worker it left behind.
    assert host.processes[0].signals == [TERM_LEADER, KILL_GROUP]
    assert (started["state"], started["revision"], started["pid"]) == ("starting", 5, 101)
    assert host.plans[1].argv[-2:] == ["--max-num-seqs", "64"]


def test_a_drain_past_its_timeout_is_ended_with_sigkill():
    host = Host()
    host.run_ready(deployment(drain_timeout_s=10))
    host.processes[0].obeys_sigterm = False
    host.sup.set_desired([deployment(revision=5, drain_timeout_s=10)])
    host.tick()
    host.tick(10.0)  # the drain timeout: vLLM aborts what still runs and exits by itself
    host.tick(EXIT_GRACE_S - 1.0)
    assert host.processes[0].signals == [TERM_LEADER]
    host.tick(1.0)  # drain timeout + the grace for its exit: SIGKILL, and the group is gone
    assert host.processes[0].signals == [TERM_LEADER, KILL_GROUP]
    assert host.tick()["revision"] == 5


def test_a_removed_deployment_is_drained_then_leaves_the_status():
    host = Host()
    host.run_ready()
    host.processes[0].obeys_sigterm = False
    host.sup.set_desired([])
    assert host.tick()["state"] == "draining"
    host.processes[0].code = 0
    host.sup.tick(host.now + 1)
    assert host.sup.status() == []


def test_a_deployment_removed_while_backing_off_goes_at_once():
    host = Host()
    host.run_ready()
    host.processes[0].code = 1
    host.tick(), host.tick()
    host.sup.set_desired([])
    host.sup.tick(host.now)
    assert host.sup.status() == [] and len(host.processes) == 1


def test_a_new_revision_of_a_crash_looping_deployment_starts_without_waiting():
    host = Host()
    host.run_ready()
    for _ in range(4):  # four crashes: the next start would be 16 s away
        host.processes[-1].code = 1
        host.tick(), host.tick(0.0)
        host.tick(host.status()["next_start_at"] - host.now)
    host.processes[-1].code = 1
    host.tick(), host.tick(0.0)
    host.sup.set_desired([deployment(revision=5)])
    fresh = host.tick(0.0)
    assert (fresh["state"], fresh["revision"], fresh["restarts"]) == ("starting", 5, 0)


def test_a_start_that_fails_is_a_crash_with_the_reason():
    host = Host()
    host.fail_spawn = FileNotFoundError("No such file or directory: 'vllm'")
    host.sup.set_desired([deployment()])
    crashed = host.tick()
    assert crashed["state"] == "crashed" and crashed["pid"] is None
    assert "could not start" in crashed["error"] and "'vllm'" in crashed["log_tail"][-1]
    assert host.tick()["state"] == "backing_off"


def test_a_bad_desired_config_leaves_the_previous_one_in_force():
    host = Host()
    host.run_ready()
    with pytest.raises(SpecError):
        host.sup.set_desired([deployment(revision=5, port="x")])
    assert host.tick()["state"] == "ready" and host.status()["revision"] == 4


def test_close_drains_everything_and_leaves_them_stopped():
    host = Host()
    host.run_ready()
    host.sup.close(sleep=lambda s: None)
    status = host.status()
    assert (status["state"], status["exit_code"]) == ("stopped", 0)
    assert host.processes[0].signals[0] == TERM_LEADER


def test_close_waits_for_a_stuck_drain_to_be_killed_before_it_returns():
    host = Host()
    host.run_ready(deployment(drain_timeout_s=10))
    host.processes[0].obeys_sigterm = False  # vLLM hung in its drain
    host.sup.close(sleep=lambda s: setattr(host, "now", host.now + s))
    # Killed at drain timeout + EXIT_GRACE_S (and its leftovers once the leader is gone), not
    # abandoned running when the agent exits.
    assert host.processes[0].signals == [TERM_LEADER, KILL_GROUP, KILL_GROUP]
    assert host.status()["state"] == "stopped"


def test_closing_before_the_first_tick_starts_nothing_and_reports_nothing():
    host = Host()
    host.sup.set_desired([deployment()])
    host.sup.close(sleep=lambda s: None)
    assert host.sup.status() == [] and host.processes == []


# --- launch safety: an old control plane cannot slip an option in; the agent's token stays home

@pytest.mark.parametrize("bad", [
    {"model": "--middleware=evilmod.app"},
    {"argv": ["--served-model-name", "m", "--tool-parser-plugin", "/tmp/p.py"]},
    {"argv": ["--tokenizer", "--middleware=evilmod.app"]},
    {"argv": ["--max-num-seqs", "8", "/tmp/extra-positional"]},
])
def test_a_deployment_whose_command_line_would_carry_an_unknown_option_is_refused(bad):
    with pytest.raises(SpecError, match="deployment 12"):
        DeploymentSpec.from_dict(deployment(**bad))


def test_the_flags_are_checked_against_the_deployments_vllm_version():
    assert DeploymentSpec.from_dict(deployment(
        vllm_version="0.32.0", argv=["--shutdown-timeout", "30"])).argv
    with pytest.raises(SpecError, match="--shutdown-timeout"):
        DeploymentSpec.from_dict(deployment(vllm_version="0.11.0",
                                            argv=["--shutdown-timeout", "30"]))


def test_the_agents_token_and_its_own_settings_never_reach_vllm():
    token = "pwa_secret-agent-token"
    spec = DeploymentSpec.from_dict(deployment(env={"PITWALL_SIM_LOAD": "3"}))
    base = {"PATH": "/bin", "PITWALL_TOKEN": token, "PITWALL_TOKEN_FILE": "/etc/pitwall/t",
            "PITWALL_SERVER": "https://pitwall", "SOME_OTHER_NAME": token,
            "PITWALL_SIM_SEED": "4", "HOME": "/root"}
    env = plan_launch(spec, ["vllm", "serve"], base_env=base, secrets=(token,)).env
    assert token not in env.values()
    assert not {"PITWALL_TOKEN", "PITWALL_TOKEN_FILE", "PITWALL_SERVER",
                "SOME_OTHER_NAME"} & set(env)
    # The simulated vLLM's own knobs pass: from the spec and from the agent's environment.
    assert env["PITWALL_SIM_LOAD"] == "3" and env["PITWALL_SIM_SEED"] == "4"
    assert env["PATH"] == "/bin" and env["HOME"] == "/root"


def test_the_supervisor_strips_the_token_it_is_given_from_every_launch():
    token = "pwa_secret-agent-token"
    host = Host(secrets=(token,))
    host.sup.set_desired([deployment()])
    host.sup.tick()
    [plan] = host.plans
    assert token not in plan.env.values()


def test_a_specs_repr_never_shows_its_environment_values():
    spec = DeploymentSpec.from_dict(deployment(env={"HF_TOKEN": "hf_very_secret"}))
    assert "hf_very_secret" not in repr(spec) and "hf_very_secret" not in str(spec)
