"""Which of a service's replicas its router sends requests to (``Deployment.in_rotation``),
and the router's side of the agent protocol.

A replica is routable when it is ready on its current revision, no rollout has taken it out,
Pitwall has not judged it stalled, its GPUs are there and its host reports. vLLM's /health
answers 200 while its engine loop is wedged (and the router trusts it), so the stall verdict
is Pitwall's own: requests running or waiting and neither a token generated nor a request
finished for ``SERVICE_STALL_S`` seconds (``telemetry.stall``), from the newest raw rows.

``sync`` sets ``in_rotation`` and ``rotation_note`` from that, records each replica leaving or
joining the rotation as a ServiceEvent and bumps the router host's ``config_version``: ingest's
reply carries it and the router's agent fetches ``router_specs`` within a batch or so, then
changes the running router's worker list (agents/router). The router's agent reports back
(``record_router_status``): a rollout waits until the router no longer lists a replica it took
out. A service that may scale to zero has its router started with a retry budget that holds a
request until the first replica serves (the spec's ``hold_s``), and the reports say when the
router last tried to send one and found no worker (``NO_WORKER_GREW``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F
from django.utils import timezone

from controlplane.fleet.deployments import ForeignDeployment
from controlplane.fleet.models import (
    Deployment,
    DeploymentState,
    Engine,
    Gpu,
    Host,
    Rollout,
    RolloutState,
    ScaleDecision,
    ScaleState,
    Service,
    ServiceEvent,
    ServiceEventKind,
)
from controlplane.fleet.queries import is_online
from controlplane.fleet.scaling_policy import Direction, router_hold_s
from controlplane.telemetry.schema import TABLES
from controlplane.telemetry.stall import stalled_engines

ROUTER_ROLE = "router"
# Rollout phases during which the replica in hand is kept out of the router (rollouts.py).
OUT_PHASES = frozenset({"out_of_router", "draining", "starting", "retiring"})
# How far back the newest engine and GPU rows are looked for (partition pruning, a bound).
NEWEST_WITHIN = timedelta(minutes=5)
NOTE_CHARS = 300  # Deployment.rotation_note's max_length
# What the control plane adds to a router's stored report: when its tries that found no worker
# last grew ({"at": unix seconds, "by": tries}), the sign of a request held at zero replicas.
NO_WORKER_GREW = "no_worker_grew"


class Why:
    """Why a replica is out of rotation: the event's ``data["why"]`` and the note's start."""

    DISABLED = "disabled"
    HOST_OFFLINE = "host offline"
    GPU_LOST = "GPU lost"
    ROLLOUT = "rollout"
    SCALING_IN = "scaling in"
    DRAINING = "draining"
    NOT_READY = "not ready"
    OLD_REVISION = "not on its current revision"
    STALLED = "stalled"


@dataclass
class Facts:
    """What routability reads beyond the deployment row, fetched once for a service's replicas:
    the lost GPUs ((host id, index)), the replicas a rollout holds out, and the stall verdict
    (deployment id -> when the stall began)."""

    lost_gpus: set[tuple[int, int]] = field(default_factory=set)
    held_out: dict[int, str] = field(default_factory=dict)  # deployment id -> rollout phase
    leaving: set[int] = field(default_factory=set)  # replicas a scale-in takes away
    stalled: dict[int, datetime] = field(default_factory=dict)


def routable(deployment: Deployment, stalled: set[int] | dict[int, datetime],
             facts: Facts | None = None) -> tuple[bool, str]:
    """Whether the router may send the replica requests, and why not ("" when it may).
    ``stalled``: the ids of the replicas judged stalled (``stalled_replicas``); ``facts``:
    lost GPUs and rollouts, read here for this replica alone when not given."""
    facts = facts if facts is not None else replica_facts([deployment], with_stall=False)
    d = deployment
    if not d.enabled:
        return False, Why.DISABLED
    if not is_online(d.host.last_seen):
        return False, f"{Why.HOST_OFFLINE} (no report within "\
                      f"{settings.PITWALL['ONLINE_WINDOW_S']} s)"
    if lost := sorted(i for i in d.gpu_indices or [] if (d.host_id, i) in facts.lost_gpus):
        return False, f"{Why.GPU_LOST}: GPU {', '.join(map(str, lost))}"
    if d.pk in facts.leaving:
        return False, f"{Why.SCALING_IN}: out of the router, then removed"
    if d.pk in facts.held_out:
        return False, f"{Why.ROLLOUT}: {facts.held_out[d.pk].replace('_', ' ')}"
    if d.state == DeploymentState.DRAINING:
        return False, Why.DRAINING
    if d.state != DeploymentState.READY:
        return False, f"{Why.NOT_READY} ({d.state})"
    if d.running_revision != d.revision:
        return False, (f"{Why.OLD_REVISION} (runs {d.running_revision}, "
                       f"wants {d.revision})")
    if d.pk in stalled:
        return False, (f"{Why.STALLED}: requests held, no token and no finished request for "
                       f"{settings.PITWALL['SERVICE_STALL_S']} s")
    return True, ""


def why_code(why: str) -> str:
    """The ``Why`` a note starts with ("stalled: requests held ..." -> "stalled")."""
    codes = [v for k, v in vars(Why).items() if k.isupper()]
    return next((c for c in sorted(codes, key=len, reverse=True) if why.startswith(c)), why)


def replica_facts(replicas: list[Deployment], now: datetime | None = None,
                  with_stall: bool = True) -> Facts:
    """Lost GPUs, rollout holds and (``with_stall``) the stall verdict of these replicas."""
    facts = Facts(lost_gpus=lost_gpus({d.host_id for d in replicas}, now))
    service_ids = {d.service_id for d in replicas if d.service_id is not None}
    for rollout in Rollout.objects.filter(service_id__in=service_ids, state=RolloutState.RUNNING,
                                          current__isnull=False, phase__in=OUT_PHASES):
        facts.held_out[rollout.current_id] = rollout.phase
    facts.leaving = set() if not service_ids else set(ScaleDecision.objects.filter(
        service_id__in=service_ids, state=ScaleState.IN_FLIGHT, direction=Direction.IN,
        deployment__isnull=False).values_list("deployment_id", flat=True))
    if with_stall:
        facts.stalled = stalled_replicas(replicas, now)
    return facts


def lost_gpus(host_ids: set[int], now: datetime | None = None) -> set[tuple[int, int]]:
    """(host id, GPU index) of the GPUs of these hosts that are gone from the inventory or
    whose newest row says NVML lost them (gpu.lost = 1). One query: the controller asks on
    every tick, for every service."""
    if not host_ids:
        return set()
    now = now or timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT g.host_id, g.index FROM {Gpu._meta.db_table} g\n"
            f"WHERE g.host_id = ANY(%(hosts)s) AND (NOT g.present OR (\n"
            f"  SELECT lost FROM {TABLES['gpu'].name} WHERE gpu_id = g.id AND ts > %(lo)s\n"
            f"  AND ts <= %(now)s AND lost IS NOT NULL ORDER BY ts DESC LIMIT 1) = 1)",
            {"hosts": sorted(host_ids), "lo": now - NEWEST_WITHIN, "now": now})
        return {(host_id, index) for host_id, index in cursor.fetchall()}


def engines_of(replicas: Iterable[Deployment]) -> dict[int, int]:
    """deployment id -> the id of its first engine (``Deployment.engine_name`` on its host),
    for the replicas whose engine the agent reported."""
    replicas = list(replicas)
    if not replicas:
        return {}
    # Two IN lists, the pairs matched here: an OR of one pair per replica cost the controller
    # more to build than to run.
    rows = Engine.objects.filter(host_id__in={d.host_id for d in replicas},
                                 name__in={d.engine_name for d in replicas})
    by_key = {(host_id, name): engine_id
              for host_id, name, engine_id in rows.values_list("host_id", "name", "id")}
    return {d.pk: by_key[(d.host_id, d.engine_name)] for d in replicas
            if (d.host_id, d.engine_name) in by_key}


def stalled_replicas(replicas: Iterable[Deployment],
                     now: datetime | None = None) -> dict[int, datetime]:
    """deployment id -> when its stall began, for the replicas stalled on the service verdict
    (SERVICE_STALL_S)."""
    engines = engines_of(replicas)
    stalled = stalled_engines(engines.values(), now=now,
                              span_s=settings.PITWALL["SERVICE_STALL_S"])
    return {d: stalled[e] for d, e in engines.items() if e in stalled}


def held_requests(engine_id: int, now: datetime | None = None) -> dict[str, float]:
    """The requests running and waiting in the engine's newest row (what a stalled replica
    held when it left the rotation)."""
    now = now or timezone.now()
    table = TABLES["engine"].name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT requests_running, requests_waiting FROM {table} WHERE engine_id = %(id)s "
            f"AND ts > %(lo)s AND ts <= %(now)s ORDER BY ts DESC LIMIT 1",
            {"id": engine_id, "lo": now - NEWEST_WITHIN, "now": now})
        row = cursor.fetchone()
    running, waiting = (float(v or 0) for v in row) if row else (0.0, 0.0)
    return {"running": running, "waiting": waiting, "held": running + waiting}


def sync(service: Service, now: datetime | None = None) -> bool:
    """Set each replica's ``in_rotation`` (and why not) from ``routable``; record who left and
    who joined; bump the router host when the rotation changed. True when it did."""
    now = now or timezone.now()
    replicas = list(service.replica_set.select_related("host").order_by("replica", "id"))
    facts = replica_facts(replicas, now)
    changed = False
    for d in replicas:
        ok, why = routable(d, facts.stalled, facts)
        note = why[:NOTE_CHARS]
        if ok == d.in_rotation and note == d.rotation_note:
            continue
        Deployment.objects.filter(pk=d.pk).update(in_rotation=ok, rotation_note=note)
        if ok != d.in_rotation:
            changed = True
            _record_turn(service, d, ok, why, d.pk in facts.stalled, now)
        d.in_rotation, d.rotation_note = ok, note
    if changed:
        bump_router(service)
    return changed


def _record_turn(service: Service, d: Deployment, into: bool, why: str, stalled: bool,
                 now: datetime) -> None:
    if into:
        ServiceEvent.objects.create(service=service, deployment=d, at=now,
                                    kind=ServiceEventKind.INTO_ROTATION,
                                    message=f"{d.name} back in the router's rotation")
        return
    data: dict[str, object] = {"why": why_code(why), "detail": why}
    message = f"{d.name} out of the router's rotation: {why}"
    if stalled and (engine := engines_of([d]).get(d.pk)) is not None:
        held = held_requests(engine, now)
        data.update(held)
        message += (f"; it held {held['held']:.0f} requests ({held['running']:.0f} running, "
                    f"{held['waiting']:.0f} waiting)")
    ServiceEvent.objects.create(service=service, deployment=d, at=now,
                                kind=ServiceEventKind.OUT_OF_ROTATION, message=message,
                                data=data)


def bump_router(service: Service) -> None:
    """The router's agent fetches its config again: its workers or its flags changed."""
    if service.router_host_id is not None:
        Host.objects.filter(pk=service.router_host_id).update(
            config_version=F("config_version") + 1)


def worker_url(d: Deployment) -> str:
    """How the router reaches a replica: the host's advertised address (its inventory's
    ``address``), else its hostname."""
    inventory = d.host.inventory if isinstance(d.host.inventory, dict) else {}
    address = inventory.get("address")
    address = address if isinstance(address, str) and address else d.host.hostname
    return f"http://[{address}]:{d.port}" if ":" in address else f"http://{address}:{d.port}"


def serves_routers(host: Host) -> bool:
    """Whether the host's agent runs with --router (its inventory's roles)."""
    roles = host.inventory.get("roles") if isinstance(host.inventory, dict) else None
    return isinstance(roles, list) and ROUTER_ROLE in roles


def router_specs(host_id: int) -> list[dict]:
    """The routers the host's agent runs: one per service it is the router host of, with the
    replicas in rotation as workers (none unless its agent has the router role)."""
    host = Host.objects.filter(pk=host_id).only("inventory").first()
    if host is None or not serves_routers(host):
        return []
    specs = []
    for service in Service.objects.filter(router_host_id=host_id).order_by("id"):
        workers = (service.replica_set.filter(in_rotation=True).select_related("host")
                   .order_by("replica", "id"))
        spec = {"service_id": service.pk, "service": service.name,
                "port": service.router_port, "policy": service.router_policy,
                "workers": [worker_url(d) for d in workers], "model": service.model}
        # Only for a service that may scale to zero: the others' routers run as before.
        if hold_s := router_hold_s(service.min_replicas, service.scaling):
            spec["hold_s"] = hold_s
        specs.append(spec)
    return specs


def record_router_status(host_id: int, reports: Iterable[dict],
                         now: datetime | None = None) -> int:
    """Store the router agent's reports on their services (already validated in shape);
    unknown services are skipped (deleted since the agent's last fetch). A report for a
    service routed by another host raises ForeignDeployment: nothing is stored."""
    reports = list(reports)
    rows = {pk: (owner, status) for pk, owner, status in Service.objects.filter(
        pk__in=[r["service_id"] for r in reports]).values_list("id", "router_host_id",
                                                                 "router_status")}
    if foreign := sorted(i for i, (owner, _) in rows.items() if owner != host_id):
        raise ForeignDeployment(f"service {foreign[0]} is routed by another host")
    now = now or timezone.now()
    stored = 0
    for report in (r for r in reports if r["service_id"] in rows):
        status = {k: v for k, v in report.items() if k != "service_id"}
        status = _with_waiting(status, rows[report["service_id"]][1], now)
        Service.objects.filter(pk=report["service_id"]).update(router_status=status,
                                                               router_reported_at=now)
        stored += 1
    return stored


def _with_waiting(status: dict, before: object, now: datetime) -> dict:
    """The report, with when the router's tries that found no worker last grew and by how
    many (NO_WORKER_GREW): its count says nothing of now, its growth says a request waits,
    which is what a service at zero replicas scales out on. The same process keeps what was
    seen of it; a new one counts from zero."""
    before = before if isinstance(before, dict) else {}
    same = status.get("pid") is not None and status.get("pid") == before.get("pid")
    tries, was = _no_worker_tries(status), _no_worker_tries(before) if same else 0
    if tries > was:
        return {**status, NO_WORKER_GREW: {"at": now.timestamp(), "by": tries - was}}
    if same and isinstance(before.get(NO_WORKER_GREW), dict):
        return {**status, NO_WORKER_GREW: before[NO_WORKER_GREW]}
    return status


def _no_worker_tries(status: dict) -> int:
    metrics = status.get("metrics")
    tries = metrics.get("no_worker_tries") if isinstance(metrics, dict) else None
    return tries if isinstance(tries, int) and not isinstance(tries, bool) else 0


def router_lists(service: Service, d: Deployment, since: datetime) -> bool | None:
    """Whether the router's report lists the replica as a worker; None when no report came
    since ``since`` (one from before would tell the worker list before the change)."""
    status = service.router_status if isinstance(service.router_status, dict) else {}
    workers = status.get("workers")
    reported = service.router_reported_at
    if not isinstance(workers, list) or reported is None or reported < since:
        return None
    return worker_url(d) in workers
