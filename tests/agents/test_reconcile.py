"""The agent's control loop: when it fetches the desired config, when it reports, and what it
does when the control plane is away. The control plane is a stand-in here (the outermost
edge); tests/e2e/test_supervised_deployment.py runs it for real."""

from __future__ import annotations

from types import SimpleNamespace

from agents.control import ControlError
from agents.reconcile import HEARTBEAT_S, REFETCH_S, RETRY_S, EngineSet, Reconciler
from agents.supervisor.spec import SpecError

SPEC = {"id": 1, "name": "a", "revision": 1, "model": "m", "port": 8100, "argv": []}


class Control:
    def __init__(self) -> None:
        self.version, self.deployments = 1, [SPEC]
        self.fetches, self.reports, self.down = 0, [], False

    def config(self) -> dict:
        self.fetches += 1
        if self.down:
            raise ControlError("GET /api/v1/agent/config: unreachable (refused)")
        return {"version": self.version, "deployments": self.deployments}

    def report(self, statuses: list) -> int:
        if self.down:
            raise ControlError("POST /api/v1/agent/status: unreachable (refused)")
        self.reports.append([dict(s) for s in statuses])
        return len(statuses)


class Supervisor:
    def __init__(self) -> None:
        self.desired, self.state, self.tail = None, "starting", ["loading"]

    def set_desired(self, deployments: list) -> None:
        if any("port" not in d for d in deployments):
            raise SpecError("deployment 1: missing port")
        self.desired = deployments

    def tick(self, now: float) -> None:
        pass

    def status(self) -> list:
        return [{"id": d["id"], "revision": d["revision"], "state": self.state,
                 "log_tail": list(self.tail)} for d in self.desired or []]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(announced=lambda: None):
    control, supervisor, clock, warnings = Control(), Supervisor(), Clock(), []
    reconciler = Reconciler(control, supervisor, announced, warn=warnings.append, clock=clock)
    return reconciler, control, supervisor, clock, warnings


def test_it_fetches_at_start_and_then_only_when_a_newer_version_is_announced():
    announced = {"v": None}
    reconciler, control, supervisor, clock, _ = make(lambda: announced["v"])
    reconciler.step()
    assert control.fetches == 1 and supervisor.desired == [SPEC] and reconciler.applied == 1
    clock.now += 5
    announced["v"] = 1
    reconciler.step()
    assert control.fetches == 1
    control.version, announced["v"] = 2, 2
    clock.now += 1
    reconciler.step()
    assert control.fetches == 2 and reconciler.applied == 2


def test_an_announced_version_older_than_the_applied_one_does_not_refetch():
    reconciler, control, _, clock, _ = make(lambda: 3)
    control.version = 4  # ingest's cached version lags the config just fetched
    reconciler.step()
    for _ in range(5):
        clock.now += 1
        reconciler.step()
    assert control.fetches == 1


def test_it_refetches_every_minute_even_without_an_announcement():
    reconciler, control, _, clock, _ = make()
    reconciler.step()
    clock.now += REFETCH_S
    reconciler.step()
    assert control.fetches == 2


def test_an_unreachable_control_plane_is_retried_later_and_warned_once():
    reconciler, control, supervisor, clock, warnings = make()
    control.down = True
    reconciler.step()
    clock.now += 1
    reconciler.step()
    assert control.fetches == 1 and len(warnings) == 1 and "unreachable" in warnings[0]
    clock.now += RETRY_S
    control.down = False
    reconciler.step()
    assert control.fetches == 2 and supervisor.desired == [SPEC]
    assert "recovered" in warnings[-1]


def test_a_config_the_supervisor_refuses_keeps_the_previous_one():
    reconciler, control, supervisor, clock, warnings = make(lambda: None)
    reconciler.step()
    control.version, control.deployments = 2, [{"id": 1, "revision": 2}]
    clock.now += REFETCH_S
    reconciler.step()
    assert supervisor.desired == [SPEC] and reconciler.applied == 1
    assert "missing port" in warnings[-1]


def test_it_reports_on_a_state_change_and_otherwise_only_as_a_heartbeat():
    reconciler, control, supervisor, clock, _ = make()
    reconciler.step()
    assert [r[0]["state"] for r in control.reports] == ["starting"]
    clock.now += 1
    reconciler.step()
    assert len(control.reports) == 1
    supervisor.state = "ready"
    clock.now += 1
    reconciler.step()
    assert [r[0]["state"] for r in control.reports] == ["starting", "ready"]
    clock.now += HEARTBEAT_S
    reconciler.step()
    assert len(control.reports) == 3


def test_new_log_lines_are_reported_at_most_every_ten_seconds():
    reconciler, control, supervisor, clock, _ = make()
    reconciler.step()
    for second in range(1, 10):
        supervisor.tail.append(f"line {second}")
        clock.now += 1
        reconciler.step()
    assert len(control.reports) == 1
    clock.now += 1
    reconciler.step()
    assert len(control.reports) == 2 and control.reports[-1][0]["log_tail"][-1] == "line 9"


def test_the_engine_set_scrapes_the_supervised_ports_beside_the_static_urls():
    sources = SimpleNamespace(engines=[])
    made = []

    def make_collector(url):
        made.append(url)
        return SimpleNamespace(url=url)

    nvml = SimpleNamespace(state_sources=[])
    engines = EngineSet(sources, make_collector, ["http://127.0.0.1:9000/metrics"], nvml,
                        state_source=lambda url: ("state", url))
    engines.follow([8100, 8101])
    assert [c.url for c in sources.engines] == ["http://127.0.0.1:9000/metrics",
                                                "http://127.0.0.1:8100/metrics",
                                                "http://127.0.0.1:8101/metrics"]
    kept = sources.engines[1]
    engines.follow([8100])
    assert sources.engines[1] is kept and len(made) == 3  # a collector's rates keep their past
    assert nvml.state_sources == [("state", "http://127.0.0.1:9000/metrics"),
                                  ("state", "http://127.0.0.1:8100/metrics")]
