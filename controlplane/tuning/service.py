"""Suggestions over their life: a tuning pass makes and refreshes them; an operator accepts,
dismisses or reverts; verification compares equal windows before and after an applied change.

A pass diagnoses every enabled deployment whose current revision has run through the whole
window (evidence must come from the config it would change), and every vLLM server an agent
reports that Pitwall does not run (no deployment at its host and port; seen for the whole
window): those get reports with the flags to paste (fragments.py), never an accept. Per
server and diagnosis there is at most one open suggestion, refreshed in place while the
symptom holds and marked ``cleared`` when it goes (or when the engine does, or a deployment
takes its port). A dismissed suggestion does not come back for the same revision (an engine
Pitwall does not run has none: ever) unless its severity grows by half (``WORSE``): the same
evidence, or noise around it, stays dismissed; a clearly worse situation is worth another
look.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from controlplane.fleet import deployments as desired
from controlplane.fleet.models import Deployment, DeploymentState, Engine, engine_port
from controlplane.tuning import verify
from controlplane.tuning.diagnoses import Finding, diagnose, over_provisioned
from controlplane.tuning.facts import Facts, Inventory, Server, gather, minute
from controlplane.tuning.fragments import as_report
from controlplane.tuning.metrics import PASS_SECONDS
from controlplane.tuning.models import DECIDED, Kind, State, Suggestion

log = logging.getLogger(__name__)

WORSE = 1.5
LOCK_KEY = 0x50_54_55_4E  # "PTUN": one tuning pass at a time across the cluster


@dataclass
class PassResult:
    deployments: int = 0
    diagnosed: int = 0  # ran their current revision through the whole window
    engines: int = 0  # vLLM servers Pitwall does not run, seen through the whole window
    created: list[int] = field(default_factory=list)
    refreshed: int = 0
    cleared: int = 0
    # servers whose diagnosis failed (logged with their name): the pass went on without them
    failed: list[str] = field(default_factory=list)


def locked_pass(now: datetime | None = None) -> PassResult | None:
    """A pass, unless another worker is running one (None then: it covers this tick)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        if not cursor.fetchone()[0]:
            return None
        try:
            with PASS_SECONDS.time():
                return tuning_pass(now)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])


def tuning_pass(now: datetime | None = None) -> PassResult:
    conf = settings.PITWALL
    end = minute(now or timezone.now())  # whole minutes: the rollups' buckets
    window, idle = (timedelta(seconds=conf["TUNING_WINDOW_S"]),
                    timedelta(seconds=conf["TUNING_IDLE_WINDOW_S"]))
    everyone = list(Deployment.objects.filter(enabled=True).select_related("host"))
    steady = [d for d in everyone if d.updated_at <= end - window]
    # Every deployment's port, enabled or not: its engines are the deployment's, never
    # reported on their own beside it.
    taken = set(Deployment.objects.values_list("host_id", "port"))
    fleet = Inventory.load({d.host_id for d in steady} | _watched_hosts(taken))
    foreign = _foreign(fleet, taken)
    servers = [Server.of(d) for d in steady] + [
        s for s, first in foreign if first.first_seen <= end - window]
    short = gather(servers, end - window, end, fleet)
    settled = [Server.of(d) for d in steady if d.updated_at <= end - idle] + [
        s for s, first in foreign if first.first_seen <= end - idle]
    long = gather(settled, end - idle, end, fleet, engines_only=True)
    result = PassResult(len(everyone), len(steady), len(servers) - len(steady))
    known = _suggestions_of(servers, short)
    for server in servers:
        _diagnose_one(server, short[server.key], long.get(server.key),
                      known.get(server.key, []), result)
    result.cleared += _clear_gone([first.id for _, first in foreign], timezone.now())
    return result


def _diagnose_one(server: Server, facts: Facts, idle_facts: Facts | None,
                  mine: list[Suggestion], result: PassResult) -> None:
    """Diagnose and record one server. Its facts come from what its agent reported, stored as
    sent: a value no diagnosis expects must cost that server its diagnosis, not the pass for
    the others. Its writes are undone (a savepoint), the failure is logged and counted."""
    before = (len(result.created), result.refreshed, result.cleared)
    try:
        with transaction.atomic():
            found = _findings(facts, idle_facts)
            if found or any(s.state == State.OPEN for s in mine):
                record(facts, found, mine, result, timezone.now())
    except Exception:  # whatever one server's data raises: logged in full, with the server
        del result.created[before[0]:]  # rolled back with the savepoint
        result.refreshed, result.cleared = before[1:]
        name = _server_name(server, facts)
        log.exception("tuning pass: %s failed and was left out of this pass", name)
        result.failed.append(name)


def _server_name(server: Server, facts: Facts) -> str:
    where = f"{facts.host.hostname}:{server.port}"
    return f"deployment {server.deployment.name} on {where}" if server.deployment else (
        f"engine at {where}")


def _findings(facts: Facts, idle_facts: Facts | None) -> list[Finding]:
    """Every diagnosis of one server; reports with a fragment to paste where Pitwall does not
    run it."""
    found = diagnose(facts)
    if idle_facts is not None and (idle := over_provisioned(idle_facts)):
        found.append(idle)
    if facts.deployment is None:
        found = [as_report(facts, f) for f in found]
    return found


def _watched_hosts(taken: set[tuple[int, int]]) -> set[int]:
    """Hosts with a present vLLM engine at a port no deployment has."""
    return {host for host, name in Engine.objects.filter(
        present=True, name__startswith="vllm:").values_list("host_id", "name")
        if (port := engine_port(name)) is not None and (host, port) not in taken}


def _foreign(fleet: Inventory, taken: set[tuple[int, int]]) -> list[tuple[Server, Engine]]:
    """The servers Pitwall does not run that have a present engine, each with its first
    engine: the one its suggestions name, whose ``first_seen`` says how long it has run (its
    config's history is not known: a whole window must lie after it)."""
    return [(Server(host, port), engines[0]) for (host, port), engines in fleet.engines.items()
            if (host, port) not in taken and any(e.present for e in engines)]


def _suggestions_of(servers: list[Server],
                    facts: dict[tuple[int, int], Facts]) -> dict[tuple, list[Suggestion]]:
    """The suggestions a pass may refresh, clear or be held back by, per server: one read
    (most servers have none). A deployment's by deployment, another's by its engine."""
    by_deployment = {s.deployment.id: s.key for s in servers if s.deployment is not None}
    by_engine = {f.engine.id: key for key, f in facts.items()
                 if f.deployment is None and f.engine is not None}
    rows = Suggestion.objects.filter(
        models.Q(deployment_id__in=by_deployment)
        | models.Q(deployment__isnull=True, engine_id__in=by_engine),
        state__in=[State.OPEN, State.DISMISSED, State.ACCEPTED, State.APPLIED]).only(
        "id", "deployment_id", "engine_id", "kind", "state", "severity", "revision")
    out: dict[tuple, list[Suggestion]] = {}
    for s in rows:
        key = (by_deployment[s.deployment_id] if s.deployment_id is not None
               else by_engine[s.engine_id])
        out.setdefault(key, []).append(s)
    return out


def _clear_gone(present: list[int], now: datetime) -> int:
    """Open reports on engines no longer reported, or whose port a deployment took."""
    return Suggestion.objects.filter(deployment__isnull=True, state=State.OPEN).exclude(
        engine_id__in=present).update(state=State.CLEARED, updated_at=now)


def record(facts: Facts, found: list[Finding], mine: list[Suggestion], result: PassResult,
           now: datetime) -> None:
    """Refresh, create or clear this server's suggestions. Each write is conditional on the
    state it read (``state = 'open'``), so an operator's accept or dismiss that lands
    meanwhile is never overwritten; the unique open suggestion per kind guards creation."""
    open_ = {s.kind: s for s in mine if s.state == State.OPEN}
    for finding in found:
        if (s := open_.pop(finding.kind, None)) is not None:
            result.refreshed += _refresh(s, finding, facts, now)
        elif not _held_back(mine, finding, _revision(facts)):
            made = _create(facts, finding, now)
            if made is not None:
                result.created.append(made.id)
    gone = [s.id for s in open_.values()]  # the symptom went away
    if gone:
        result.cleared += Suggestion.objects.filter(id__in=gone, state=State.OPEN).update(
            state=State.CLEARED, updated_at=now)


def _revision(facts: Facts) -> int | None:
    return facts.deployment.revision if facts.deployment is not None else None


def _fields(finding: Finding, facts: Facts) -> dict[str, Any]:
    return {"changes": finding.changes, "reasoning": finding.reasoning,
            "expected": finding.expected, "confidence": finding.confidence,
            "evidence": finding.evidence, "severity": finding.severity,
            "command": finding.command, "revision": _revision(facts)}


def _refresh(s: Suggestion, finding: Finding, facts: Facts, now: datetime) -> int:
    engine = {"engine": facts.engine} if facts.engine is not None else {}
    return Suggestion.objects.filter(pk=s.pk, state=State.OPEN).update(
        updated_at=now, **engine, **_fields(finding, facts))


def _create(facts: Facts, finding: Finding, now: datetime) -> Suggestion | None:
    try:
        with transaction.atomic():
            return Suggestion.objects.create(
                deployment=facts.deployment, engine=facts.engine, kind=finding.kind,
                created_at=now, updated_at=now, **_fields(finding, facts))
    except IntegrityError:  # another pass made it meanwhile (no lock held: a direct call)
        return None


def _held_back(mine: list[Suggestion], finding: Finding, revision: int | None) -> bool:
    """Dismissed for this revision (an engine Pitwall does not run has none: None) and not
    clearly worse, or a change of the same kind is being applied or verified."""
    for s in mine:
        if s.kind != finding.kind:
            continue
        # Made against the revision before the change: compare by state, not revision.
        if s.state in (State.ACCEPTED, State.APPLIED):
            return True
        if (s.state == State.DISMISSED and s.revision == revision
                and finding.severity < s.severity * WORSE):
            return True
    return False


# -- an operator's decisions --------------------------------------------------------------


class Refused(Exception):
    """The suggestion cannot take this action now; the message says why."""


NOT_RUN_BY_PITWALL = ("Pitwall does not run this engine (it has no deployment): a report "
                      "only; apply its command fragment to the vllm serve command line by "
                      "hand, or dismiss it")


@transaction.atomic
def accept(s: Suggestion, user=None) -> Suggestion:
    """Change the deployment's desired config as proposed (a new revision); the agent applies
    it by a graceful restart and verification follows."""
    s = Suggestion.objects.select_for_update().get(pk=s.pk)
    if s.deployment_id is None:
        raise Refused(NOT_RUN_BY_PITWALL)
    d = Deployment.objects.select_for_update().get(pk=s.deployment_id)
    if s.state != State.OPEN:
        raise Refused(f"the suggestion is {s.state}: only an open one can be accepted")
    if not s.changes:
        raise Refused("this suggestion is a report: it proposes no change to apply")
    if d.revision != s.revision:
        raise Refused(f"the deployment changed since (revision {s.revision} -> {d.revision}); "
                      f"the next pass re-examines it")
    reason = f"suggestion #{s.pk}: {Kind(s.kind).label}"
    if d.service_id is not None:
        _through_service(d, {c["field"]: c["proposed"] for c in s.changes}, user, reason)
        # the rollout gives the replica its next revision
        revision_after = d.revision + 1
    else:
        for c in s.changes:
            _apply_change(d, c["field"], c["proposed"])
        try:
            desired.save(d, author=user, reason=reason)
        except ValidationError as exc:
            raise Refused("the proposed config is refused: " + "; ".join(exc.messages)) from None
        revision_after = d.revision
    s.state, s.decided_at, s.decided_by = State.ACCEPTED, timezone.now(), user
    s.revision_after = revision_after
    s.save()
    return s


def _through_service(d: Deployment, changes: dict[str, Any], user, reason: str) -> None:
    """A service replica changes only through its service: the arguments go into the
    service's (a new service revision) and roll through every replica, checked one by one.
    Its GPUs, CPUs and NUMA node are placement's to choose, not a suggestion's. A value of
    None removes the argument (vLLM's default)."""
    from controlplane.fleet import services
    from controlplane.fleet.models import Service

    service = Service.objects.select_for_update().get(pk=d.service_id)
    if placed := sorted(f for f in changes if not f.startswith("args.")):
        raise Refused(f"{d.name} is a replica of service {service.name!r}: placement chooses "
                      f"its {', '.join(placed)}; only argument changes roll through a service")
    args = copy.deepcopy(service.args or {})
    for name, value in changes.items():
        if value is None:
            args.pop(name[5:], None)
        else:
            args[name[5:]] = value
    service.args = args
    try:
        services.save(service, author=user, reason=f"{reason} (made for replica {d.name})")
    except ValidationError as exc:
        raise Refused("the proposed config is refused: " + "; ".join(exc.messages)) from None


def _apply_change(d: Deployment, name: str, value: Any) -> None:
    if name.startswith("args."):
        d.args = {**copy.deepcopy(d.args or {}), name[5:]: value}
    elif name in ("cpus", "gpu_indices", "numa_node", "enabled"):
        setattr(d, name, value)
    else:
        raise Refused(f"cannot apply a change to {name!r}")


@transaction.atomic
def dismiss(s: Suggestion, user=None) -> Suggestion:
    s = Suggestion.objects.select_for_update().get(pk=s.pk)
    if s.state != State.OPEN:
        raise Refused(f"the suggestion is {s.state}: only an open one can be dismissed")
    s.state, s.decided_at, s.decided_by = State.DISMISSED, timezone.now(), user
    s.save()
    return s


@transaction.atomic
def revert(s: Suggestion, user=None) -> Suggestion:
    """Back to the config the suggestion was made against, as a new revision."""
    s = Suggestion.objects.select_for_update().get(pk=s.pk)
    if s.deployment_id is None:
        raise Refused(NOT_RUN_BY_PITWALL)
    if s.state not in DECIDED:
        raise Refused(f"the suggestion is {s.state}: only an accepted one can be reverted")
    d = Deployment.objects.select_for_update().get(pk=s.deployment_id)
    if d.service_id is not None:
        _through_service(d, {c["field"]: c["current"] for c in s.changes}, user,
                         f"revert suggestion #{s.pk}")
    else:
        try:
            desired.revert(d, s.revision, user, f"revert suggestion #{s.pk}")
        except ValidationError as exc:
            raise Refused("; ".join(exc.messages)) from None
    s.state = State.REVERTED
    s.save(update_fields=["state"])
    return s


# -- after a change: applied, then verified ----------------------------------------------


def follow_up(now: datetime | None = None) -> dict[str, int]:
    """Mark accepted changes the agent runs as applied; verify those whose after-window is
    complete."""
    now = now or timezone.now()
    counts = {"applied": 0, "verified": 0}
    for s in Suggestion.objects.filter(state=State.ACCEPTED).select_related("deployment"):
        if _running(s):
            s.state = State.APPLIED
            s.applied_at = max(s.deployment.state_since or now, s.decided_at or now)
            s.save(update_fields=["state", "applied_at"])
            counts["applied"] += 1
    for s in Suggestion.objects.filter(state=State.APPLIED).select_related("deployment"):
        if verify.due(s, now):
            verify.conclude(s)
            counts["verified"] += 1
    return counts


def _running(s: Suggestion) -> bool:
    d = s.deployment
    return (d.state == DeploymentState.READY and d.running_revision is not None
            and s.revision_after is not None and d.running_revision >= s.revision_after)
