"""Hostnames, engine names and GPU uuids of the targets of one cycle, for labels and summaries."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection
from django.db.models import Model

from controlplane.alerts.arrays import numbers
from controlplane.alerts.models import Alert
from controlplane.alerts.queries import Hit, Hits
from controlplane.fleet.models import Engine, Gpu, Host, Service

SERVICE_TARGET = "service:"  # a service_disrupted alert's target: "service:<id>"


def hostnames(ids: set) -> dict[int, str]:
    return {i: name for i, name in by_ids(Host, ids, "hostname")}


def by_ids(model: type[Model], ids: set[int], *columns: str) -> list[tuple]:
    """(id, *columns) of these rows, the ids sent as one int8[] literal: a storm cycle names
    thousands of GPUs, and ``id__in`` bound each as its own parameter (a quarter of a second
    a cycle over the scope step and the state half)."""
    if not ids:
        return []
    with connection.cursor() as cursor:
        quoted = ", ".join(connection.ops.quote_name(c) for c in columns)
        cursor.execute(f"SELECT id, {quoted} FROM {model._meta.db_table}"
                       " WHERE id = ANY(%(ids)s::int8[])", {"ids": numbers(ids)})
        return cursor.fetchall()


@dataclass
class FleetNames:
    """Hostnames, engine names and GPU uuids/indexes of the targets in this cycle only."""

    hosts: dict[int, str]
    engines: dict[int, str]
    gpus: dict[int, tuple[str, int]]
    models: dict[int, str]  # engine id -> the model it serves
    services: dict[str, str] = field(default_factory=dict)  # "service:<id>" -> its name

    @classmethod
    def load(cls, hits: Hits, alerts) -> FleetNames:
        rows = [*(h for found in hits.values() for h in found), *alerts]
        ids = {k: {getattr(r, f"{k}_id") for r in rows} - {None} for k in ("host", "engine", "gpu")}
        engines = by_ids(Engine, ids["engine"], "name", "model")
        return cls(
            hostnames(ids["host"]), {i: name for i, name, _ in engines},
            {i: (u, x) for i, u, x in by_ids(Gpu, ids["gpu"], "uuid", "index")},
            {i: model for i, _, model in engines}, _service_names(r.target for r in rows))

    def labels(self, hit: Hit) -> dict[str, str]:
        out = {"host": self.hosts.get(hit.host_id, "")}
        if hit.engine_id is not None:
            out["engine"] = self.engines.get(hit.engine_id, "")
        if hit.gpu_id is not None:
            out["gpu"] = self.gpus.get(hit.gpu_id, ("", 0))[0]
        if hit.target in self.services:
            out["service"] = self.services[hit.target]
        return out

    def scope_labels(self, hit: Hit) -> dict[str, str]:
        """What a rule's label_matchers read (rules.SCOPE_LABELS): the alert's labels and the
        engine's model (``silences.matches`` reads a label the target lacks as "")."""
        return {**self.labels(hit), "model": self.models.get(hit.engine_id, "")}

    def fields(self, alert: Alert, value: float | None) -> dict[str, object]:
        uuid, index = self.gpus.get(alert.gpu_id, ("", "")) if alert.gpu_id else ("", "")
        return {"value": value, "target": alert.target, "host": self.hosts.get(alert.host_id, ""),
                "host_id": alert.host_id, "engine": self.engines.get(alert.engine_id, ""),
                "engine_id": alert.engine_id, "gpu": uuid, "gpu_id": alert.gpu_id,
                "gpu_index": index, "service": self.services.get(alert.target, "")}


def _service_names(targets) -> dict[str, str]:
    """The names of the services among these targets."""
    ids = {int(t[len(SERVICE_TARGET):]) for t in targets
           if t.startswith(SERVICE_TARGET) and t[len(SERVICE_TARGET):].isdigit()}
    if not ids:
        return {}
    return {f"{SERVICE_TARGET}{i}": name
            for i, name in Service.objects.filter(id__in=ids).values_list("id", "name")}
