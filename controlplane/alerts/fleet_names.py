"""Hostnames, engine names and GPU uuids of the targets of one cycle, for labels and summaries."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.alerts.models import Alert
from controlplane.alerts.queries import Hit, Hits
from controlplane.fleet.models import Engine, Gpu, Host


def hostnames(ids: set) -> dict[int, str]:
    return dict(Host.objects.filter(id__in=ids).values_list("id", "hostname")) if ids else {}


@dataclass
class FleetNames:
    """Hostnames, engine names and GPU uuids/indexes of the targets in this cycle only."""

    hosts: dict[int, str]
    engines: dict[int, str]
    gpus: dict[int, tuple[str, int]]
    models: dict[int, str]  # engine id -> the model it serves

    @classmethod
    def load(cls, hits: Hits, alerts) -> FleetNames:
        rows = [*(h for found in hits.values() for h in found), *alerts]
        ids = {k: {getattr(r, f"{k}_id") for r in rows} - {None} for k in ("host", "engine", "gpu")}
        engines = list(Engine.objects.filter(id__in=ids["engine"])
                       .values_list("id", "name", "model"))
        return cls(
            hostnames(ids["host"]), {i: name for i, name, _ in engines},
            {i: (u, x) for i, u, x in
             Gpu.objects.filter(id__in=ids["gpu"]).values_list("id", "uuid", "index")},
            {i: model for i, _, model in engines})

    def labels(self, hit: Hit) -> dict[str, str]:
        out = {"host": self.hosts.get(hit.host_id, "")}
        if hit.engine_id is not None:
            out["engine"] = self.engines.get(hit.engine_id, "")
        if hit.gpu_id is not None:
            out["gpu"] = self.gpus.get(hit.gpu_id, ("", 0))[0]
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
                "gpu_index": index}
