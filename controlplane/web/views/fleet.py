from __future__ import annotations

from dataclasses import dataclass, field

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.fleet.queries import hosts_with_state, is_online
from controlplane.web.latest import Values, latest
from controlplane.web.views.access import read_fleet
from controlplane.web.views.common import page_context


@dataclass
class FleetRow:
    """One host of the fleet table, with the figures the client sorts by."""

    host: Host
    online: bool
    values: Values
    gpus: list[tuple[Gpu, Values]] = field(default_factory=list)
    engines: list[tuple[Engine, Values]] = field(default_factory=list)

    @property
    def gpu_util(self) -> float | None:
        utils = [v["util_pct"] for _, v in self.gpus if "util_pct" in v]
        return sum(utils) / len(utils) if utils else None

    @property
    def kv_usage(self) -> float | None:
        return max((v["kv_cache_usage"] for _, v in self.engines if "kv_cache_usage" in v),
                   default=None)

    @property
    def waiting(self) -> float | None:
        waits = [v["requests_waiting"] for _, v in self.engines if "requests_waiting" in v]
        return sum(waits) if waits else None


def fleet_rows() -> list[FleetRow]:
    hosts = list(hosts_with_state())
    gpus = [g for h in hosts for g in h.gpus.all() if g.present]
    engines = [e for h in hosts for e in h.engines.all() if e.present]
    host_values = latest("host", [h.id for h in hosts])
    gpu_values = latest("gpu", [g.id for g in gpus])
    engine_values = latest("engine", [e.id for e in engines])
    rows = {h.id: FleetRow(h, is_online(h.last_seen), host_values[h.id]) for h in hosts}
    for gpu in gpus:
        rows[gpu.host_id].gpus.append((gpu, gpu_values[gpu.id]))
    for engine in engines:
        rows[engine.host_id].engines.append((engine, engine_values[engine.id]))
    return list(rows.values())


@read_fleet
def fleet(request: HttpRequest) -> HttpResponse:
    rows = fleet_rows()
    context = page_context(request, "fleet", ["fleet"], rows=rows,
                           online_count=sum(r.online for r in rows))
    return render(request, "web/fleet.html", context)
