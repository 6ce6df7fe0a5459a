"""Services: checking a service's config, versioning it, and keeping its replicas placed.

A service is a model on ``replicas`` replicas; each replica is a Deployment the service owns
(``Deployment.service``, its slot in ``replica``, named ``<service>-<slot>``), placed by
``placement`` and changed only through the service (``deployments.OwnedByService``). What a
replica runs (``REPLICA_FIELDS``) comes from the service; its host, GPUs, CPUs and port from
placement.

Everything a deployment's config obeys, a service's replica config obeys through the same
functions (deployments.py): the argument catalog, env bounds, write-only env values (revisions
keep them redacted, a revert keeps the values the service holds), and the rule that only
holders of ``fleet.deploy_code`` write a config that loads code. The replicas themselves are
written by Pitwall (author None, the reason naming the service's revision and its author):
the service's write is the one checked, so a writer may scale a service whose config
someone allowed to load code, as they may re-enable such a deployment.

A change of ``REPLICA_FIELDS`` starts a rollout (``rollouts.start``); a change of ``replicas``
scales (``scale``); router changes bump the router hosts' config version, and so does a change
of the router's hold at zero replicas (``min_replicas`` to or from 0: its router restarts).
``replace`` serves healing: a new replica, elsewhere, for a lost one. Placements are
serialised by one advisory lock, so two services never take the same GPU; a plain deployment
saved meanwhile that takes one is caught by ``deployments.check`` and the service's change is
refused whole.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from agents import vllm_args
from controlplane.fleet import deployments, host_labels, placement
from controlplane.fleet.deployments import CodeNotPermitted, OwnedByService
from controlplane.fleet.models import (
    Deployment,
    Host,
    RolloutStrategy,
    RouterPolicy,
    ScalingMode,
    Service,
    ServiceEvent,
    ServiceEventKind,
    ServiceRevision,
)
from controlplane.fleet.scaling_policy import knob_errors, router_hold_s

REPLICA_FIELDS = ("model", "vllm_version", "args", "env", "drain_timeout_s")
ROUTER_FIELDS = ("router_host", "router_port", "router_policy")
# What a revision keeps; router_host by id.
SCALING_FIELDS = ("scaling_mode", "min_replicas", "max_replicas", "scaling")
SERVICE_FIELDS = (*REPLICA_FIELDS, "replicas", "selector", "gpu_model", *ROUTER_FIELDS,
                  "strategy", "max_unavailable", "max_surge", "canary_window_s",
                  *SCALING_FIELDS)
MAX_NAME = 60
NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\Z")
MAX_MODEL = 300
MAX_VERSION = 32
MAX_REPLICAS = 64
MAX_GPU_MODEL = 120
CANARY_WINDOW_S = (60, 86400)
PLACEMENT_LOCK = "SELECT pg_advisory_xact_lock(hashtext('pitwall.placement'))"

__all__ = ["REPLICA_FIELDS", "SERVICE_FIELDS", "CodeNotPermitted", "OwnedByService", "check",
           "config", "delete", "replace", "replica_config", "revert", "save", "scale"]


def config(service: Service) -> dict:
    """The service's desired config as revisions keep it (env values still in)."""
    values = {name: getattr(service, name) for name in SERVICE_FIELDS if name != "router_host"}
    return {**values, "router_host": service.router_host_id}


def replica_config(service: Service) -> dict:
    """The REPLICA_FIELDS a replica takes from its service."""
    return {name: getattr(service, name) for name in REPLICA_FIELDS}


# -- check ----------------------------------------------------------------------------------


def check(service: Service) -> None:
    """Raise a ValidationError keyed by field when the service cannot be stored as it is."""
    version_problems = _version_errors(service.vllm_version)
    checks = (
        ("name", _name_errors(service)),
        ("model", _model_errors(service.model)),
        ("vllm_version", version_problems),
        ("args", [] if version_problems else deployments.arg_errors(service.args,
                                                                     service.vllm_version)),
        ("env", deployments.env_errors(service.env)),
        ("drain_timeout_s", deployments.drain_errors(service.drain_timeout_s)
         if _whole(service.drain_timeout_s) else ["must be a whole number of seconds"]),
        ("replicas", _replicas_errors(service)),
        ("selector", _selector_errors(service.selector)),
        ("gpu_model", _text_errors(service.gpu_model, MAX_GPU_MODEL, blank=True)),
        ("router_host", _router_host_errors(service)),
        ("router_port", _router_port_errors(service)),
        ("router_policy", _choice_errors(service.router_policy, RouterPolicy.values)),
        ("strategy", _choice_errors(service.strategy, RolloutStrategy.values)),
        ("max_unavailable", _int_errors(service.max_unavailable, 1, MAX_REPLICAS)),
        ("max_surge", _int_errors(service.max_surge, 0, MAX_REPLICAS)),
        ("canary_window_s", _int_errors(service.canary_window_s, *CANARY_WINDOW_S)),
        ("scaling_mode", _choice_errors(service.scaling_mode, ScalingMode.values)),
        ("min_replicas", _min_replicas_errors(service)),
        ("max_replicas", _max_replicas_errors(service)),
        ("scaling", knob_errors(service.scaling)),
    )
    errors = {field: problems for field, problems in checks if problems}
    if errors:
        raise ValidationError(errors)


def _replicas_errors(service: Service) -> list[str]:
    """0 only for a service that scales from zero by itself: in any other, nothing would ever
    start its first replica again."""
    if service.replicas != 0 or not _whole(service.replicas):
        return _int_errors(service.replicas, 1, MAX_REPLICAS)
    if service.scaling_mode != ScalingMode.AUTO or service.min_replicas != 0:
        return ["0 only with scaling_mode auto and min_replicas 0 (scale to zero: the "
                f"autoscaler starts the first replica when a request comes); otherwise a "
                f"whole number from 1 to {MAX_REPLICAS}"]
    return []


def _min_replicas_errors(service: Service) -> list[str]:
    """0 (scale to zero) needs a router: it holds the requests sent meanwhile and is the one
    that sees them, to start the first replica on."""
    if problems := _int_errors(service.min_replicas, 0, MAX_REPLICAS):
        return problems
    if service.min_replicas == 0 and service.router_host_id is None:
        return ["0 needs a router (router_host): it holds the requests sent while no replica "
                "runs, and starts the first one on them"]
    return []


def _max_replicas_errors(service: Service) -> list[str]:
    problems = _int_errors(service.max_replicas, 1, MAX_REPLICAS)
    if problems or not _whole(service.min_replicas):
        return problems
    if service.max_replicas < service.min_replicas:
        return [f"must be at least min_replicas ({service.min_replicas})"]
    return []


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_errors(value: object, low: int, high: int) -> list[str]:
    if _whole(value) and low <= value <= high:
        return []
    return [f"must be a whole number from {low} to {high}"]


def _text_errors(value: object, most: int, blank: bool = False) -> list[str]:
    if not isinstance(value, str):
        return ["must be a string"]
    if not blank and not value.strip():
        return ["must not be blank"]
    if len(value) > most:
        return [f"at most {most} characters, not {len(value)}"]
    return [f"{value[:20]!r}... holds a control character"] if any(
        ord(c) < 32 for c in value) else []


def _choice_errors(value: object, choices: list[str]) -> list[str]:
    return [] if value in choices else [f"one of {', '.join(choices)}"]


def _name_errors(service: Service) -> list[str]:
    name = service.name
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not NAME.match(name):
        return [f"1 to {MAX_NAME} of a-z 0-9 -, starting and ending with a letter or a digit "
                "(its replicas are named <name>-<slot>)"]
    if Service.objects.filter(name=name).exclude(pk=service.pk).exists():
        return [f"a service named {name!r} exists"]
    # A replica's name is unique on its host: a deployment of that shape would block it.
    clashes = sorted(d_name for d_name in Deployment.objects.filter(name__startswith=f"{name}-")
                     .exclude(service_id=service.pk if service.pk else -1)
                     .values_list("name", flat=True)
                     if d_name[len(name) + 1:].isdigit())
    if clashes:
        return [f"deployment {clashes[0]!r} exists: this service's replicas are named "
                f"{name}-<slot>; choose another name"]
    return []


def _model_errors(model: object) -> list[str]:
    return _text_errors(model, MAX_MODEL) or deployments.model_errors(model)


def _version_errors(version: object) -> list[str]:
    if problems := _text_errors(version, MAX_VERSION):
        return problems
    try:
        vllm_args.parse_version(version)
    except ValueError as exc:
        return [str(exc)]
    return []


def _selector_errors(selector: object) -> list[str]:
    """Bounded as host labels are (host_labels.check): the selector matches them exactly."""
    try:
        host_labels.check(selector)
    except ValidationError as exc:
        return exc.message_dict.get("labels", exc.messages)
    return []


def _router_host_errors(service: Service) -> list[str]:
    if service.router_host_id is None:
        return []  # no router: the replicas are reached directly
    host = Host.objects.filter(pk=service.router_host_id).only("hostname", "inventory").first()
    if host is None:
        return [f"no host {service.router_host_id}"]
    if "router" not in placement.roles(host.inventory):
        return [f"host {host.hostname!r} does not serve routers: its inventory reports no role "
                "'router' (run its agent with --router)"]
    return []


def _router_port_errors(service: Service) -> list[str]:
    if problems := _int_errors(service.router_port, 1024, 65535):
        return problems
    if service.router_host_id is None:
        return []
    port, host = service.router_port, service.router_host_id
    used = Deployment.objects.filter(host_id=host, port=port).values_list("name", flat=True)
    if name := used.first():
        return [f"port {port} is used on the router host by deployment {name!r}"]
    other = (Service.objects.filter(router_host_id=host, router_port=port)
             .exclude(pk=service.pk).values_list("name", flat=True).first())
    if other:
        return [f"port {port} is used on the router host by the router of service {other!r}"]
    return []


# -- save, revert, delete --------------------------------------------------------------------


def _lock_placement() -> None:
    """One placement at a time: each reads the fleet, then takes GPUs and ports in it."""
    with connection.cursor() as cursor:
        cursor.execute(PLACEMENT_LOCK)


def _stored(service: Service) -> tuple[dict, int] | None:
    """The stored config and revision (the row locked), None for a new service."""
    if service.pk is None:
        return None
    row = Service.objects.select_for_update().filter(pk=service.pk).first()
    return (config(row), row.revision) if row is not None else None


def _replica_part(values: dict | None) -> dict | None:
    """A service config as deployments.permission_problems reads a deployment's."""
    return None if values is None else {name: values.get(name) for name in REPLICA_FIELDS}


@transaction.atomic
def save(service: Service, author=None, reason: str = "") -> ServiceRevision | None:
    """Check and store a new or changed service as a new revision; None when nothing changed.
    A new service places its replicas; a change of REPLICA_FIELDS starts a rollout; a change
    of ``replicas`` scales. An env value of REDACTED keeps the stored value; CodeNotPermitted
    when `author` may not make the change. Nothing is stored when anything is refused."""
    _lock_placement()
    stored = _stored(service)
    before, revision = stored if stored is not None else (None, 0)
    service.env = deployments.resolve_env(service.env, (before or {}).get("env") or {})
    check(service)
    after = config(service)
    if not deployments.may_load_code(author) and (problems := deployments.permission_problems(
            _replica_part(before), _replica_part(after))):
        raise CodeNotPermitted(problems)
    changed = [n for n in SERVICE_FIELDS if before is None or before.get(n) != after[n]]
    if before is not None and not changed:
        return None
    if before is not None and "env" in changed:
        changed += [f"env.{k}" for k in deployments.env_diff(before.get("env") or {},
                                                              after["env"])]
    service.revision = revision + 1
    service.updated_at = timezone.now()
    service.save()
    made = ServiceRevision.objects.create(
        service=service, revision=service.revision,
        config=deployments.redacted_config(after), changed=changed, author=author,
        reason=reason)
    _apply(service, before, changed, revision, author)
    return made


def _apply(service: Service, before: dict | None, changed: list[str], revision: int,
           author) -> None:
    """What a stored change does to the replicas and the routers."""
    if before is None:
        _place_missing(service, author)
    else:
        if set(changed) & set(REPLICA_FIELDS):
            from controlplane.fleet import rollouts  # rollouts reads services' helpers

            rollouts.start(service, revision, service.revision, author)
        if "replicas" in changed:
            scale(service, author)
        if set(changed) & set(SCALING_FIELDS):
            # Judged again at once on the last whole minute, not at the next minute's turn:
            # switched from recommend to auto, the advice is taken on the next tick.
            Service.objects.filter(pk=service.pk).update(scaling_minute=None)
            service.scaling_minute = None
    routers = {service.router_host_id, (before or {}).get("router_host")}
    if before is None or set(changed) & {*ROUTER_FIELDS, "replicas"} or _hold_changed(
            before, service):
        for host_id in routers - {None}:
            deployments._bump(host_id)


def _hold_changed(before: dict, service: Service) -> bool:
    """Whether the router's hold at zero replicas changed (min_replicas to or from 0, or its
    zero_hold_s): its agent restarts the router with the new retry budget."""
    return (router_hold_s(before.get("min_replicas"), before.get("scaling"))
            != router_hold_s(service.min_replicas, service.scaling))


@transaction.atomic
def revert(service: Service, revision: int, author=None,
           reason: str = "") -> ServiceRevision | None:
    """A new revision with the config of an earlier one (env values: the ones held now)."""
    old = ServiceRevision.objects.filter(service=service, revision=revision).first()
    if old is None:
        raise ValidationError({"revision": [f"service {service.name!r} has no revision "
                                            f"{revision}"]})
    if lost := deployments.lost_env(old.config.get("env"), service.env):
        raise ValidationError({"env": [
            f"{', '.join(lost)}: revision {revision} does not keep env values (they are "
            "write-only) and the service no longer holds one: set it first, then revert"]})
    for name in SERVICE_FIELDS:
        if name in old.config:
            setattr(service, "router_host_id" if name == "router_host" else name,
                    old.config[name])
    return save(service, author, reason or f"revert to revision {revision}")


@transaction.atomic
def delete(service: Service, author=None) -> None:
    """Its replicas leave the hosts' configs (each agent drains and stops its own), its router
    leaves the router host's; the service's rows (revisions, rollouts, events) go with it."""
    _lock_placement()
    for replica in Deployment.objects.filter(service=service):
        deployments.delete(replica, owner=service)
    if service.router_host_id is not None:
        deployments._bump(service.router_host_id)
    service.delete()


# -- placing replicas ------------------------------------------------------------------------


@transaction.atomic
def scale(service: Service, author=None) -> None:
    """Place the missing replicas (slots 0..replicas-1 without one), remove the extra ones
    (slots beyond). Idempotent: the controller may call it to retry unplaced replicas."""
    _lock_placement()
    removed = _remove_extra(service)
    placed = _place_missing(service, author)
    if (removed or placed) and service.router_host_id is not None:
        deployments._bump(service.router_host_id)


def _remove_extra(service: Service) -> list[Deployment]:
    extra = list(Deployment.objects.filter(service=service, replica__gte=service.replicas)
                 .select_related("host").order_by("-replica"))
    for replica in extra:
        deployments.delete(replica, owner=service)
    if extra:
        gone = ", ".join(f"replica {d.replica} on host {d.host.hostname}" for d in extra)
        _event(service, ServiceEventKind.PLACED,
               f"scaled to {service.replicas} replicas: removed {gone}",
               {"removed": [{"replica": d.replica, "host": d.host.hostname} for d in extra]})
    return extra


def _place_missing(service: Service, author) -> list[Deployment]:
    """Place the slots below ``replicas`` that have no replica; record the decision."""
    held = list(Deployment.objects.filter(service=service).values_list("replica", "host_id"))
    missing = sorted(set(range(service.replicas)) - {slot for slot, _ in held})
    if not missing:
        _set_unplaced(service, 0, None)
        return []
    before = Service.objects.filter(pk=service.pk).values_list("unplaced", flat=True).first()
    hosts = placement.hosts_for(service)
    need = placement.need_for(service, hosts, len(missing), already=[h for _, h in held])
    decided = placement.place(need, hosts)
    made = [_create_replica(service, slot_no, slot, author)
            for slot_no, slot in zip(missing, decided.slots, strict=False)]
    _set_unplaced(service, decided.unplaced, decided)
    if made:
        _event(service, ServiceEventKind.PLACED, _placed_message(made, decided),
               {"slots": [{"replica": d.replica, "host": s.hostname, "reason": s.reason}
                          for d, s in zip(made, decided.slots, strict=True)]},
               deployment=made[0] if len(made) == 1 else None)
    # An event when the count changes; the controller's retries every tick record none, and
    # Service.placement keeps the latest reasons.
    if decided.unplaced and decided.unplaced != before:
        _event(service, ServiceEventKind.UNPLACED, decided.summary(),
               {"unplaced": decided.unplaced, "skipped": decided.as_json()["skipped"]})
    return made


def _placed_message(made: list[Deployment], decided: placement.Placement) -> str:
    where = "; ".join(s.reason for s in decided.slots[:placement.MAX_DETAILS])
    more = (f"; and {len(made) - placement.MAX_DETAILS} more"
            if len(made) > placement.MAX_DETAILS else "")
    return f"placed {len(made)} of {decided.wanted} replicas: {where}{more}"


def _create_replica(service: Service, slot_no: int, slot: placement.Slot,
                    author) -> Deployment:
    replica = Deployment(
        host_id=slot.host_id, name=f"{service.name}-{slot_no}", service=service,
        replica=slot_no, in_rotation=False,
        port=slot.port, gpu_indices=slot.gpu_indices, cpus=slot.cpus,
        numa_node=slot.numa_node, placement_reason=slot.reason[:1000],
        **replica_config(service))
    by = f" by {author.get_username()}" if author is not None else ""
    deployments.save(replica, None, f"replica {slot_no} of service {service.name} (revision "
                     f"{service.revision}{by}): {slot.reason}"[:1000], owner=service)
    return replica


def _set_unplaced(service: Service, unplaced: int,
                  decided: placement.Placement | None) -> None:
    service.unplaced = unplaced
    fields = ["unplaced"]
    if decided is not None:
        service.placement = decided.as_json()
        fields.append("placement")
    service.save(update_fields=fields)


def _event(service: Service, kind: str, message: str, data: dict,
           deployment: Deployment | None = None) -> ServiceEvent:
    return ServiceEvent.objects.create(service=service, kind=kind, message=message, data=data,
                                       deployment=deployment)


@transaction.atomic
def replace(deployment: Deployment, why: str) -> Deployment | None:
    """A new replica in the lost one's slot on another host (healing); the lost one is
    deleted (its agent, if it answers again, drains and stops it). None, with the reasons
    stored in ``Service.placement``, when no other host can take it: the lost one stays."""
    _lock_placement()
    service = Service.objects.get(pk=deployment.service_id)
    old_host = Host.objects.values_list("hostname", flat=True).get(pk=deployment.host_id)
    others = Deployment.objects.filter(service=service).exclude(pk=deployment.pk)
    hosts = placement.hosts_for(service, exclude_deployments=[deployment.pk])
    need = placement.need_for(service, hosts, 1, avoid_hosts=[deployment.host_id],
                              already=list(others.values_list("host_id", flat=True)))
    decided = placement.place(need, hosts)
    if not decided.slots:
        service.placement = decided.as_json()
        service.save(update_fields=["placement"])
        return None
    slot_no, old_id = deployment.replica, deployment.pk
    deployments.delete(deployment, owner=service)
    made = _create_replica(service, slot_no, decided.slots[0], None)
    service.placement = decided.as_json()
    service.save(update_fields=["placement"])
    slot = decided.slots[0]
    _event(service, ServiceEventKind.HEALED,
           f"replica {slot_no} moved from host {old_host} to host {slot.hostname}: {why}",
           {"replica": slot_no, "old_host": old_host, "new_host": slot.hostname,
            "old_deployment": old_id, "new_deployment": made.pk, "why": why,
            "reason": slot.reason}, deployment=made)
    if service.router_host_id is not None:
        deployments._bump(service.router_host_id)
    return made
