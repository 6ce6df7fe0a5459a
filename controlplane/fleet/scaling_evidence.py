"""A service's last minutes, as the autoscaler reads them: its replicas' raw engine rows,
minute by minute (``scaling_policy.Minute``).

Raw rows, not rollups: the scale-out window is two minutes, and the rollup of a minute settles
later than a decision should wait. Each replica's gauges are averaged over the minute, then
summed over the replicas (requests waiting and running) or averaged (KV usage); the TTFT burn
rate comes from the bucket counts summed over the minute and the replicas, against the TTFT
objective (``telemetry/objectives``), as the alerts' ``error_budget_burn`` reads it.

At zero replicas there are no engine rows: what the router said of the requests it holds
(``router_waiting``) is the evidence.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db import connection

from controlplane.fleet import routing
from controlplane.fleet.models import Deployment, Service
from controlplane.fleet.scaling_policy import Minute, Waiting
from controlplane.telemetry import objectives
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.rollups.refresh import floor
from controlplane.telemetry.schema import TABLES
from controlplane.telemetry.series.histograms import (
    dominant_layout,
    engine_buckets,
    histogram_fraction,
)

MINUTE = timedelta(minutes=1)
# An engine whose first row of a minute comes this late into it came up during the minute
# (the agents sample every 1-10 s): the minute is not one it served whole.
WHOLE_SLACK_S = 15


def service_minutes(replicas: list[Deployment], start: datetime,
                    end: datetime) -> list[Minute]:
    """The whole minutes in (start, end] of these replicas' engines, oldest first; a minute is
    stamped with its end. Minutes no replica reported are absent."""
    engine_ids = sorted(set(routing.engines_of(replicas).values()))
    if not engine_ids:
        return []
    lo, hi = floor(start, 60), floor(end, 60)
    gauges = _gauges(engine_ids, lo, hi)
    burns = _ttft_burns(engine_ids, lo, hi)
    return [Minute(at=at + MINUTE, replicas=len(per_engine),
                   waiting=sum(e[0] for e in per_engine), running=sum(e[1] for e in per_engine),
                   kv_usage=_mean([e[2] for e in per_engine]), ttft_burn=burns.get(at),
                   requests=round(sum(e[3] for e in per_engine) * 60))
            for at, per_engine in sorted(gauges.items())]


def router_waiting(service: Service) -> Waiting | None:
    """When the router's tries that found no worker last grew, and by how many, as the
    control plane recorded it from the router agent's reports (``routing.record_router_status``);
    None when they never grew in its current process."""
    status = service.router_status if isinstance(service.router_status, dict) else {}
    grew = status.get(routing.NO_WORKER_GREW)
    if not isinstance(grew, dict):
        return None
    at, tries = grew.get("at"), grew.get("by")
    if not isinstance(at, int | float) or not isinstance(tries, int):
        return None
    return Waiting(datetime.fromtimestamp(at, UTC), tries)


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _gauges(engine_ids: list[int], lo: datetime,
            hi: datetime) -> dict[datetime, list[tuple[float, float, float | None, float]]]:
    """minute -> per engine that served the whole minute: mean waiting, running, KV usage and
    finished requests per s."""
    table = TABLES["engine"].name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT date_trunc('minute', ts), engine_id, min(ts), "
            f"coalesce(avg(requests_waiting), 0), coalesce(avg(requests_running), 0), "
            f"avg(kv_cache_usage), coalesce(avg(requests_finished_per_s), 0) FROM {table} "
            f"WHERE engine_id = ANY(%(ids)s) AND ts >= %(lo)s AND ts < %(hi)s AND up = 1 "
            f"GROUP BY 1, 2",
            {"ids": engine_ids, "lo": lo - MINUTE, "hi": hi})
        rows = cursor.fetchall()
    reported = {(at, engine_id) for at, engine_id, *_ in rows}
    out: dict[datetime, list] = defaultdict(list)
    for at, engine_id, first, waiting, running, kv, finished in rows:
        if at < lo or not _whole(at, first, (at - MINUTE, engine_id) in reported):
            continue
        out[at].append((float(waiting), float(running), None if kv is None else float(kv),
                        float(finished)))
    return out


def _whole(minute: datetime, first: datetime, reported_before: bool) -> bool:
    """Whether an engine served the whole minute: it reported in the minute before, or from
    the minute's first seconds. An engine that came up late in a minute would make that
    minute's mean of its last seconds: a queue of 7 s read as a minute's (measured on the real
    CPU build: a replica ready at :50 and loaded at :53 scaled out at the next :02)."""
    return reported_before or (first - minute).total_seconds() <= WHOLE_SLACK_S


def _ttft_burns(engine_ids: list[int], lo: datetime, hi: datetime) -> dict[datetime, float]:
    """minute -> the TTFT error budget's burn rate over the replicas' requests of the minute."""
    per_minute = engine_buckets("ttft_seconds", engine_ids, lo, hi, per_minute=True)
    bounds = dict(HistogramLayout.objects.filter(
        pk__in={layout for by_layout in per_minute.values() for layout in by_layout})
        .values_list("pk", "bounds"))
    upper, target = objectives.objective_s("ttft"), objectives.target()
    out: dict[datetime, float] = {}
    for at, by_layout in per_minute.items():
        layout, buckets = dominant_layout(by_layout)
        burn = objectives.burn_rate(histogram_fraction(upper, bounds.get(layout) or [],
                                                       buckets), target)
        if burn is not None:
            out[at] = round(burn, 4)
    return out
