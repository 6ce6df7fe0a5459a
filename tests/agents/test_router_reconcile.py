"""The control loop with the router role: the config's routers reach the router supervisor,
its status goes out with the reports, and a newer config_version wakes the loop at once. The
control plane and the supervisors are stand-ins here (the routers' own behaviour is in
test_router_processes.py, the whole agent against the real server in test_router_agent.py)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agents.cli import _AnnouncingShipper
from agents.config import ConfigError, build_parser, config_from_args
from agents.reconcile import HEARTBEAT_S, Reconciler
from agents.router.spec import parse_routers
from agents.spool import Spool
from agents.transport import IngestClient
from tests.support.polling import wait_until

ROUTER = {"service_id": 3, "service": "llama", "port": 9000, "policy": "power_of_two",
          "workers": ["http://10.0.0.5:8001"], "model": "m"}
DEPLOYMENT = {"id": 1, "name": "a", "revision": 1, "model": "m", "port": 8100, "argv": []}


class Control:
    def __init__(self) -> None:
        self.config_body: dict[str, Any] = {"version": 1, "deployments": [DEPLOYMENT],
                                            "routers": [ROUTER]}
        self.fetches = 0
        self.reports: list[tuple[list, list | None]] = []

    def config(self) -> dict[str, Any]:
        self.fetches += 1
        return self.config_body

    def report(self, statuses: list, routers: list | None = None) -> int:
        self.reports.append((statuses, routers))
        return len(statuses)


class Supervisor:
    def __init__(self) -> None:
        self.desired: list | None = None

    def set_desired(self, deployments: list) -> None:
        self.desired = deployments

    def tick(self, now: float) -> None:
        pass

    def status(self) -> list:
        return [{"id": d["id"], "revision": 1, "state": "ready"} for d in self.desired or []]


class Routers:
    """Checks like the real one (parse_routers), reports what a test sets."""

    def __init__(self, order: list[str] | None = None) -> None:
        self.desired: dict | None = None
        self.state, self.workers, self.order = "starting", [], order
        self.metrics: dict[str, Any] = {"requests_total": 0, "per_worker": {}}

    def set_desired(self, routers: list) -> None:
        self.desired = parse_routers(routers)

    def tick(self, now: float) -> None:
        if self.order is not None:
            self.order.append("routers")

    def status(self) -> list:
        return [{"service_id": i, "state": self.state, "pid": 10, "port": s.port,
                 "workers": list(self.workers), "healthy": True, "error": "",
                 "log_tail": [], "metrics": dict(self.metrics),
                 "at": 1.0} for i, s in sorted((self.desired or {}).items())]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(supervisor: Any = None, routers: Any = None, announced=lambda: None):
    control, clock, warnings = Control(), Clock(), []
    reconciler = Reconciler(control, supervisor, announced, warn=warnings.append, clock=clock,
                            routers=routers)
    return reconciler, control, clock, warnings


def test_the_configs_routers_reach_the_router_supervisor_and_deployments_theirs():
    supervisor, routers = Supervisor(), Routers()
    reconciler, control, _, _ = make(supervisor, routers)
    reconciler.step()
    assert supervisor.desired == [DEPLOYMENT]
    assert list(routers.desired) == [3] and routers.desired[3].port == 9000
    statuses, reported = control.reports[-1]
    assert statuses == [{"id": 1, "revision": 1, "state": "ready"}]
    assert reported[0]["service_id"] == 3 and reported[0]["state"] == "starting"


def test_a_config_without_routers_means_none():
    routers = Routers()
    reconciler, control, _, _ = make(Supervisor(), routers)
    del control.config_body["routers"]
    reconciler.step()
    assert routers.desired == {}


def test_a_router_only_agent_runs_no_deployment_and_reports_none():
    routers = Routers()
    reconciler, control, _, _ = make(None, routers)
    reconciler.step()
    assert control.reports[-1][0] == [] and len(control.reports[-1][1]) == 1


def test_without_the_router_role_the_report_has_no_routers_key():
    reconciler, control, _, _ = make(Supervisor(), None)
    reconciler.step()
    assert control.reports[-1][1] is None


def test_a_refused_router_list_keeps_the_routers_and_costs_the_deployments_nothing():
    supervisor, routers = Supervisor(), Routers()
    reconciler, control, clock, warnings = make(supervisor, routers, lambda: 2)
    reconciler.step()
    control.config_body = {"version": 2, "deployments": [], "routers": [
        {**ROUTER, "workers": ["http://10.0.0.5:8001/v1"]}]}
    clock.now += 1
    reconciler.step()
    assert supervisor.desired == [] and reconciler.applied == 2
    assert routers.desired[3].workers == ("http://10.0.0.5:8001",)
    assert any("routers: not applied, the running ones stay" in w for w in warnings)


def test_the_routers_tick_before_the_vllm_supervisor():
    order: list[str] = []

    class Ordered(Supervisor):
        def tick(self, now: float) -> None:
            order.append("deployments")

    reconciler, _, _, _ = make(Ordered(), Routers(order))
    reconciler.step()
    assert order == ["routers", "deployments"]


def test_a_router_change_is_reported_at_once_and_otherwise_with_the_heartbeat():
    routers = Routers()
    reconciler, control, clock, _ = make(Supervisor(), routers)
    reconciler.step()
    sent = len(control.reports)
    clock.now += 1
    reconciler.step()
    assert len(control.reports) == sent  # nothing changed
    routers.state, routers.workers = "ready", ["http://10.0.0.5:8001"]
    clock.now += 1
    reconciler.step()
    assert len(control.reports) == sent + 1
    assert control.reports[-1][1][0]["workers"] == ["http://10.0.0.5:8001"]
    routers.workers = []  # the worker left the router: the controller waits for this report
    clock.now += 1
    reconciler.step()
    assert len(control.reports) == sent + 2 and control.reports[-1][1][0]["workers"] == []
    clock.now += HEARTBEAT_S
    reconciler.step()
    assert len(control.reports) == sent + 3


def test_tries_that_found_no_worker_are_reported_at_once_other_counts_with_the_heartbeat():
    """At zero replicas a request held by the router is what starts the first replica: its
    tries go out on the next step; the request counts of a busy router wait for the
    heartbeat."""
    routers = Routers()
    routers.metrics = {"requests_total": 0, "per_worker": {}, "no_worker_tries": 0}
    reconciler, control, clock, _ = make(Supervisor(), routers)
    reconciler.step()
    sent = len(control.reports)
    routers.metrics = {**routers.metrics, "requests_total": 50}
    clock.now += 1
    reconciler.step()
    assert len(control.reports) == sent
    routers.metrics = {**routers.metrics, "no_worker_tries": 2}
    clock.now += 1
    reconciler.step()
    assert len(control.reports) == sent + 1
    assert control.reports[-1][1][0]["metrics"]["no_worker_tries"] == 2


def test_a_poke_ends_the_loops_wait_at_once():
    """The loop waits an hour between steps here; only a poke can make it step again."""
    announced = {"version": 1}
    reconciler, control, _, _ = make(Supervisor(), Routers(), lambda: announced["version"])
    stop = threading.Event()
    loop = threading.Thread(target=reconciler.run, args=(stop, 3600.0), daemon=True)
    loop.start()
    try:
        wait_until(lambda: control.fetches == 1, 10)
        control.config_body = {**control.config_body, "version": 2}
        announced["version"] = 2
        reconciler.poke()
        wait_until(lambda: control.fetches == 2, 10, lambda: "the poke did not wake it")
        assert reconciler.applied == 2
    finally:
        stop.set()
        reconciler.poke()
        loop.join(timeout=10)
    assert not loop.is_alive()


def test_the_sender_rings_when_a_reply_carries_a_new_config_version(tmp_path):
    rings: list[int | None] = []
    shipper = _AnnouncingShipper(IngestClient("http://127.0.0.1:1", "token"),
                                 Spool(tmp_path / "spool", 1 << 20, lambda m: None),
                                 inventory=lambda: None, warn=lambda m: None)
    shipper.on_new_config_version = lambda: rings.append(shipper.config_version)
    assert shipper.config_version is None and rings == []
    for version in (7, 7, 8, 8, 8):  # what successive ingest replies carry
        shipper.config_version = version
    assert rings == [7, 8]


def test_the_router_flags():
    parse = build_parser().parse_args
    base = ["run", "--server", "http://127.0.0.1:8000", "--token", "t"]
    plain = config_from_args(parse(base), env={})
    assert plain.router is False and plain.router_command is None and plain.roles == ()
    routing = config_from_args(parse([*base, "--router", "--router-command",
                                      "/opt/router/bin/vllm-router --x"]), env={})
    assert routing.router is True and routing.roles == ("router",)
    assert routing.router_command == ("/opt/router/bin/vllm-router", "--x")
    with pytest.raises(ConfigError, match="--router-command is empty"):
        config_from_args(parse([*base, "--router", "--router-command", " "]), env={})

