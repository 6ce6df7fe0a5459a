"""The models whose changes are audited, and the signal handlers that record them.

Saves and deletes through the ORM are caught here whatever made them (API, pages, the admin
site, commands). The few changes made with a bulk UPDATE (acknowledging an alert, revoking a
token) call ``record`` where they happen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Model
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

from controlplane.audit import actor as actors
from controlplane.audit.record import REDACTED, record

CHANGED_SECRET = "(redacted, changed)"


@dataclass(frozen=True)
class Tracked:
    label: str  # as the log shows it: "alert rule"
    fields: tuple[str, ...] = ()  # only these fields; () for every field not ignored
    ignore: frozenset[str] = frozenset()  # runtime state, not a decision of anyone's
    secret: frozenset[str] = frozenset()  # logged as changed, never with their values
    people_only: bool = False  # the system's own changes are not decisions: not logged


_RUNTIME = frozenset({"created_at", "updated_at"})
TRACKED: dict[str, Tracked] = {
    "alerts.AlertRule": Tracked("alert rule", ignore=_RUNTIME | {
        "last_evaluated_at", "last_error", "last_error_at"}),
    "alerts.Channel": Tracked("channel", ignore=_RUNTIME | {
        "last_attempt_at", "last_ok", "last_detail"}, secret=frozenset({"config"})),
    "alerts.Route": Tracked("route", ignore=_RUNTIME),
    "alerts.Silence": Tracked("silence", ignore=_RUNTIME),
    "fleet.Deployment": Tracked("deployment", fields=(
        "host", "name", "enabled", "model", "port", "gpu_indices", "vllm_version", "args",
        "cpus", "numa_node", "env", "drain_timeout_s", "revision"),
        secret=frozenset({"env"})),
    "fleet.Service": Tracked("service", fields=(
        "name", "model", "vllm_version", "args", "env", "drain_timeout_s", "replicas",
        "selector", "gpu_model", "router_host", "router_port", "router_policy", "strategy",
        "max_unavailable", "max_surge", "canary_window_s", "scaling_mode", "min_replicas",
        "max_replicas", "scaling", "revision"),
        secret=frozenset({"env"})),
    "fleet.ScaleDecision": Tracked("scale decision", fields=(
        "service", "mode", "direction", "replicas_before", "replicas_after", "reason",
        "state", "deployment", "ready_s", "detail")),
    "tuning.Suggestion": Tracked("suggestion", fields=("state", "decided_at", "decided_by"),
                                 people_only=True),
    "fleet.ApiToken": Tracked("API token", ignore=frozenset({"digest", "last_used_at"})),
    "fleet.AgentToken": Tracked("agent token", ignore=frozenset({"digest", "last_used_at"})),
    "auth.User": Tracked("user", ignore=frozenset({"last_login", "date_joined"}),
                         secret=frozenset({"password"})),
    "auth.Group": Tracked("group"),
}
# Many-to-many relations whose changes are logged on their owner: {through label: field}.
TRACKED_RELATIONS = {"auth.User.groups": "groups", "auth.User.user_permissions": "permissions",
                     "auth.Group.permissions": "permissions", "alerts.Route.channels": "channels"}


def connect() -> None:
    for label in TRACKED:
        model = apps.get_model(label)
        pre_save.connect(_before_save, sender=model, dispatch_uid=f"audit-pre-{label}")
        post_save.connect(_after_save, sender=model, dispatch_uid=f"audit-post-{label}")
        post_delete.connect(_after_delete, sender=model, dispatch_uid=f"audit-del-{label}")
    for path in TRACKED_RELATIONS:
        label, field = path.rsplit(".", 1)
        through = getattr(apps.get_model(label), field).through
        m2m_changed.connect(_relation_changed, sender=through, dispatch_uid=f"audit-m2m-{path}")


def _spec(model: type[Model]) -> Tracked:
    return TRACKED[model._meta.label]


def _fields(model: type[Model], spec: Tracked) -> dict[str, str]:
    """{field name: attribute name} of the logged concrete fields (host -> host_id)."""
    names = spec.fields or tuple(f.name for f in model._meta.concrete_fields if not f.primary_key)
    return {n: model._meta.get_field(n).attname for n in names if n not in spec.ignore}


def _values(instance: Model, spec: Tracked, only: frozenset[str] | None = None) -> dict:
    fields = _fields(type(instance), spec)
    return {name: _plain(getattr(instance, attname)) for name, attname in fields.items()
            if only is None or name in only}


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def _before_save(sender, instance: Model, raw: bool = False, update_fields=None, **kwargs):
    if raw or instance.pk is None:
        return
    spec = _spec(sender)
    only = frozenset(update_fields) if update_fields else None
    fields = {n: a for n, a in _fields(sender, spec).items() if only is None or n in only}
    if not fields:  # a save of runtime fields only (last_used_at): nothing to compare
        instance._audit_before = {}
        return
    old = sender._base_manager.filter(pk=instance.pk).values(*fields.values()).first()
    instance._audit_before = (None if old is None else
                              {n: _plain(old[a]) for n, a in fields.items()})


def _after_save(sender, instance: Model, created: bool, raw: bool = False, update_fields=None,
                **kwargs):
    if raw:
        return
    spec = _spec(sender)
    who = actors.current()
    if spec.people_only and not who.person:
        return
    before = None if created else getattr(instance, "_audit_before", None)
    instance.__dict__.pop("_audit_before", None)
    only = frozenset(update_fields) if update_fields and not created else None
    after = _values(instance, spec, only)
    changes = _diff(before or {}, after, spec.secret, created)
    if changes or created:
        record("created" if created else "changed", spec.label, instance.pk, str(instance),
               changes, by=who)


def _after_delete(sender, instance: Model, **kwargs):
    spec = _spec(sender)
    who = actors.current()
    if spec.people_only and not who.person:
        return
    values = _values(instance, spec)
    changes = {n: [_redact(v, n in spec.secret), None] for n, v in values.items()
               if v not in (None, "", [], {})}
    record("deleted", spec.label, instance.pk, str(instance), changes, by=who)


def _relation_changed(sender, instance: Model, action: str, pk_set, model, reverse: bool,
                      **kwargs):
    if action not in ("post_add", "post_remove", "post_clear") or reverse:
        return
    field = next(f for p, f in TRACKED_RELATIONS.items()
                 if p.rsplit(".", 1)[0] == type(instance)._meta.label
                 and getattr(type(instance), p.rsplit(".", 1)[1]).through is sender)
    names = sorted(str(o) for o in model._base_manager.filter(pk__in=pk_set or ()))
    verb = {"post_add": "added", "post_remove": "removed", "post_clear": "cleared"}[action]
    record("changed", _spec(type(instance)).label, instance.pk, str(instance),
           {field: {verb: names}})


def _diff(before: dict, after: dict, secret: frozenset[str], created: bool) -> dict:
    changes = {}
    for name, new in after.items():
        old = before.get(name)
        if old == new or (created and new in (None, "", [], {})):
            continue
        if name in secret:
            changes[name] = _secret_change(old, new)
        else:
            changes[name] = [old, new]
    return changes


def _secret_change(old: Any, new: Any) -> list[Any]:
    """A secret's change: for a mapping (env, channel config) which keys changed, else that
    it changed; never a value."""
    if isinstance(old, dict) or isinstance(new, dict):
        old, new = old or {}, new or {}
        return [{k: REDACTED for k in old},
                {k: CHANGED_SECRET if old.get(k) != v or k not in old else REDACTED
                 for k, v in new.items()}]
    return [REDACTED if old else None, CHANGED_SECRET]


def _redact(value: Any, secret: bool) -> Any:
    if not secret:
        return value
    return {k: REDACTED for k in value} if isinstance(value, dict) else REDACTED
