"""What the controller's tests (routing, rollouts, healing) share: a service placed on the
service fleet, its agents' reports written as the agents write them (``record_status``), the
router agent following its config, engine rows, and the controller ticking on a clock the
test moves.

The agents here do what the real ones do, one report per tick: the supervisor of a host whose
deployment got a new revision drains the old process, then starts the new one, then reports it
ready (``Agents.step``); a router agent reports as its workers exactly the list its config
gives it (``Agents.route``). A test overrides what one replica does (``Agents.script``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from controlplane.fleet import deployments, routing, services
from controlplane.fleet.models import Deployment, DeploymentState, Engine, Host, Service
from controlplane.fleet.tasks import TickResult, tick
from controlplane.telemetry.models import HistogramLayout
from tests.support.service_fleet import LLAMA, gpu_host, router_host
from tests.telemetry.rollup_data import insert_rows

TTFT_BOUNDS = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0]
ITL_BOUNDS = [0.01, 0.025, 0.05, 0.1, 0.25]


def hosts(n: int) -> list[Host]:
    """n online GPU hosts of two H100s each in the online pool, each its own port range (they
    share the simulated fleet's addresses)."""
    return [gpu_host(f"gpu-{chr(ord('a') + i)}", {"pool": "online", "zone": f"rack-{i % 2}"},
                     port_range=(8000 + 100 * i, 8099 + 100 * i)) for i in range(n)]


def make_service(router: Host | None, replicas: int = 3, **fields) -> Service:
    """A service placed on the fleet through services.save (as the API does)."""
    values = {"name": "llama", "model": LLAMA, "vllm_version": "0.33.0",
              "args": {"max_num_seqs": 128}, "env": {"VLLM_LOGGING_LEVEL": "INFO"},
              "replicas": replicas, "selector": {"pool": "online"}, "router_host": router,
              "router_port": 9000, "max_surge": 0, **fields}
    service = Service(**values)
    services.save(service, reason="first rollout")
    return service


def change_args(service: Service, **args) -> Service:
    service.refresh_from_db()
    service.args = {**service.args, **args}
    services.save(service, reason="a change")
    return service


def replicas(service: Service) -> list[Deployment]:
    return list(Deployment.objects.filter(service=service).select_related("host")
                .order_by("replica", "id"))


def report(d: Deployment, state: str, revision: int | None = None, restarts: int = 0,
           error: str = "", since: datetime | None = None, phases: dict | None = None) -> None:
    """One supervisor report of one deployment, as the agent posts it."""
    item = {"id": d.pk, "state": state, "revision": revision, "restarts": restarts,
            "error": error, "since": (since or timezone.now()).timestamp()}
    deployments.record_status(d.host_id, [item])
    if phases is not None:
        Deployment.objects.filter(pk=d.pk).update(start_phases=phases)


Behaviour = Callable[[Deployment], None]


@dataclass
class Agents:
    """The service's agents: each tick, every replica's supervisor takes one step and the
    router agent reports the workers its config names."""

    service: Service
    router: Host | None
    scripts: dict[int, Behaviour] = field(default_factory=dict)  # slot -> what it does
    hosts: list[int] = field(default_factory=list)  # the hosts whose agents report

    def __post_init__(self) -> None:
        self.hosts = self.hosts or list(Host.objects.values_list("id", flat=True))

    def script(self, slot: int, behaviour: Behaviour) -> None:
        self.scripts[slot] = behaviour

    def step(self, now: datetime | None = None) -> None:
        """Every agent reports (its host's last_seen is ``now``), then every replica's
        supervisor takes a step and the router agent reports."""
        Host.objects.filter(pk__in=self.hosts).update(last_seen=now or timezone.now())
        for d in replicas(self.service):
            self.scripts.get(d.replica, supervise)(d)
        self.route(now)

    def route(self, now: datetime | None = None) -> None:
        """The router agent applied its config: its report lists exactly those workers (it
        arrives at ``now``, the test's clock)."""
        if self.router is None:
            return
        for spec in routing.router_specs(self.router.pk):
            routing.record_router_status(self.router.pk, [{
                "service_id": spec["service_id"], "state": "ready", "workers": spec["workers"],
                "healthy": True}])
        Service.objects.filter(router_host=self.router).update(
            router_reported_at=now or timezone.now())


def supervise(d: Deployment) -> None:
    """One step of a well-behaved supervisor: a new revision drains the old process, then
    starts the new one, then it is ready."""
    if d.running_revision is None:
        report(d, DeploymentState.READY, d.revision)
    elif d.running_revision != d.revision:
        if d.state == DeploymentState.READY:
            report(d, DeploymentState.DRAINING, d.running_revision)
        else:  # drained, or not running at all: the new revision starts
            report(d, DeploymentState.STARTING, d.revision)
    elif d.state == DeploymentState.STARTING:
        report(d, DeploymentState.READY, d.revision)


def crashes_with(**args) -> Behaviour:
    """A supervisor whose process crashes at every start while its arguments hold ``args``
    (a flag this build refuses), and behaves otherwise."""
    def behaviour(d: Deployment) -> None:
        bad = all(d.args.get(k) == v for k, v in args.items())
        if bad and d.running_revision != d.revision and d.state == DeploymentState.DRAINING:
            report(d, DeploymentState.CRASHED, d.revision, restarts=1, error="exit 1: bad flag")
        elif not (bad and d.running_revision == d.revision):
            supervise(d)
    return behaviour


@dataclass
class Clock:
    """The controller's now, moved by the test (no sleeping)."""

    now: datetime = field(default_factory=timezone.now)

    def tick(self, seconds: float = 3.0) -> TickResult:
        self.now += timedelta(seconds=seconds)
        return tick(self.now)


def run(clock: Clock, agents: Agents, until: Callable[[], bool], ticks: int = 300,
        each: Callable[[], None] | None = None) -> int:
    """Tick (agents, then controller) until ``until()``; ``each`` runs after every tick.
    Returns the ticks it took."""
    for n in range(1, ticks + 1):
        agents.step(clock.now)
        result = clock.tick()
        assert not result.failed, result
        if each is not None:
            each()
        if until():
            return n
    raise AssertionError(f"not done after {ticks} ticks")


def layout(bounds: list[float]) -> int:
    return HistogramLayout.objects.get_or_create(bounds=bounds)[0].id


def engine(d: Deployment) -> Engine:
    return Engine.objects.get_or_create(host_id=d.host_id, name=d.engine_name,
                                        defaults={"model": d.model})[0]


def engine_rows(d: Deployment, start: datetime, end: datetime, step_s: float = 2.0,
                **values) -> None:
    """Raw engine rows of the replica's engine every ``step_s`` in [start, end]."""
    engine_id = engine(d).pk
    rows, ts = [], start
    while ts <= end:
        rows.append({"engine_id": engine_id, "ts": ts, "up": 1, **values})
        ts += timedelta(seconds=step_s)
    insert_rows("engine", rows)


__all__ = ["Agents", "Clock", "ITL_BOUNDS", "TTFT_BOUNDS", "change_args", "engine",
           "engine_rows", "hosts", "layout", "make_service", "crashes_with", "replicas",
           "report", "router_host", "run", "supervise"]
