"""The fleet page: every host with its GPUs and engines, and the fleet's totals on top."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.alerts.models import Alert, AlertState
from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.fleet.queries import hosts_with_state, is_online
from controlplane.telemetry.stall import stalled_engines
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
        return _total([v for _, v in self.engines], "requests_waiting")


# A GPU counts as busy in the totals at this utilisation or more (NVML's share of time a kernel
# ran): an idle or nearly idle GPU is capacity left; fleet.js counts live with the same figure.
BUSY_UTIL_PCT = 50.0


@dataclass
class FleetTotals:
    """The fleet at a glance, over the hosts online now (an offline host's values are old)."""

    gpus: int  # present GPUs of the online hosts
    gpus_busy: int  # of them, at BUSY_UTIL_PCT or more
    generation_tokens_per_s: float | None  # None: no engine reported it
    requests_waiting: float | None
    alerts_firing: int
    busy_by_host: dict[int, int]  # host id -> its busy GPUs: the live count starts from these
    tokens_by_host: dict[int, float]  # host id -> its engines' tokens/s, likewise


def fleet_totals(rows: list[FleetRow]) -> FleetTotals:
    online = [r for r in rows if r.online]
    busy_by_host = {r.host.id: sum(1 for _, v in r.gpus if (v["util_pct"] or 0) >= BUSY_UTIL_PCT)
                    for r in online}
    engines = [v for r in online for _, v in r.engines]
    tokens_by_host = {r.host.id: tokens for r in online
                      if (tokens := _total([v for _, v in r.engines],
                                           "generation_tokens_per_s")) is not None}
    return FleetTotals(
        gpus=sum(len(r.gpus) for r in online), gpus_busy=sum(busy_by_host.values()),
        generation_tokens_per_s=_total(engines, "generation_tokens_per_s"),
        requests_waiting=_total(engines, "requests_waiting"),
        alerts_firing=Alert.objects.filter(state=AlertState.FIRING).count(),
        busy_by_host=busy_by_host, tokens_by_host=tokens_by_host)


def _total(values: list[Values], key: str) -> float | None:
    reported = [v[key] for v in values if v[key] is not None]
    return sum(reported) if reported else None


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
    stalled = stalled_engines([e.id for e in engines])
    for engine in engines:
        engine.stalled_since = stalled.get(engine.id)  # the chip's "stalled" badge
        rows[engine.host_id].engines.append((engine, engine_values[engine.id]))
    return list(rows.values())


@read_fleet
def fleet(request: HttpRequest) -> HttpResponse:
    rows = fleet_rows()
    totals = fleet_totals(rows)
    context = page_context(request, "fleet", ["fleet"], rows=rows,
                           online_count=sum(r.online for r in rows), totals=totals)
    context["page_config"]["totals"] = {"busy_util_pct": BUSY_UTIL_PCT,
                                        "busy_by_host": totals.busy_by_host,
                                        "tokens_by_host": totals.tokens_by_host}
    return render(request, "web/fleet.html", context)
