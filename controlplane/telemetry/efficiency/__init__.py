"""Efficiency and objectives per engine and per model over a range (docs/efficiency.md).

``report`` reads, for the engines in question, over the range asked (1 h, 24 h, 7 d or 30 d
ending at ``end``), from the coarsest rollup tier that serves it (stretches.py):

- generation tokens: ``engine.generation_tokens_per_s`` summed over the samples, times the
  agent's sampling interval (as the rows show it);
- energy: the rise of the engine's GPUs' total energy counter (``gpu.energy_j``) when every
  one of them reported it, else their ``gpu.power_w`` integrated over the samples;
- GPU-hours: the engine's GPUs times the hours with samples; cost from the GPU-hour price;
- objective attainment: the share of TTFT and ITL observations under the objectives, from
  the histograms summed over the range, and the error-budget burn over its last hour and its
  last 30 days.

A model's figures are its engines' totals added up. No HTTP here: ``SeriesError`` names the
request parameter at fault; statements run under the query timeout (``QueryTimeout``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TypeVar

from django.conf import settings
from django.db import connection, connections
from django.db.models import Q

from agents.protocol import METRICS
from controlplane.fleet.models import Engine, Gpu
from controlplane.lib.standby.router import reading, reading_from_standby
from controlplane.telemetry.efficiency import reads
from controlplane.telemetry.efficiency.figures import (
    ENERGY_COUNTER,
    POWER,
    Figures,
    Inputs,
    Layouts,
    Terms,
    figures,
)
from controlplane.telemetry.efficiency.stretches import plan_stretches
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.objectives import OBJECTIVES, objective_s, target
from controlplane.telemetry.series.errors import SeriesError
from controlplane.telemetry.series.plan import Stretch, oldest_partitions, watermarks
from controlplane.telemetry.series.sqlbits import fetch
from controlplane.telemetry.series.timeouts import statement_timeout

__all__ = ["DEFAULT_RANGE", "RANGES", "EngineRow", "Figures", "ModelRow", "Report", "report"]

RANGES: dict[str, timedelta] = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
DEFAULT_RANGE = "1h"
# Ranges that end, unless told otherwise, where the 1-hour rollups do (default_end), when
# those are at most this far behind the clock: an hour, the settle time and a late run.
ROLLED_UP = ("24h", "7d", "30d")
ROLLED_UP_LAG = timedelta(hours=1, minutes=15)
BURN_WINDOWS = {"1h": timedelta(hours=1), "30d": timedelta(days=30)}
# Instants an end may be: a 30-day window before it stays a datetime.
EARLIEST = datetime(1971, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)

GENERATION = METRICS["engine.generation_tokens_per_s"]
POWER_METRIC = METRICS["gpu.power_w"]
HISTOGRAMS = {name: METRICS[metric] for name, (metric, _) in OBJECTIVES.items()}
# Without a reading of the sampling interval (a single sample), the agent's default.
DEFAULT_INTERVAL_S = 1.0
_T = TypeVar("_T")


@dataclass(frozen=True)
class EngineRow:
    id: int
    name: str
    host_id: int
    hostname: str
    model: str
    gpu_ids: list[int]
    figures: Figures


@dataclass(frozen=True)
class ModelRow:
    model: str
    engine_ids: list[int]
    figures: Figures


@dataclass(frozen=True)
class Report:
    range: str
    start: datetime
    end: datetime
    resolution: str  # the tier read for the range's whole buckets: "raw", "1m" or "1h"
    stretches: list[Stretch]  # the tables the engines' figures were read from, in time order
    target: float
    objective_ms: dict[str, float]
    gpu_hour_price: float | None
    currency: str
    energy_counter_known: bool  # whether the catalog has gpu.energy_j at all
    engines: list[EngineRow]
    models: list[ModelRow]


def report(range_name: str = DEFAULT_RANGE, end: datetime | None = None,
           engine_ids: list[int] | None = None, model: str | None = None) -> Report:
    if range_name not in RANGES:
        raise SeriesError("range", f"range must be one of {', '.join(RANGES)}")
    # Read once: the default end and every window's plan use them.
    built = watermarks()
    end = end or default_end(range_name, built=built)
    if not EARLIEST < end < LATEST:
        raise SeriesError("end", f"end must be between {EARLIEST.date()} and {LATEST.date()}")
    start = end - RANGES[range_name]
    engines = _engines(start, engine_ids, model)
    # Another connection sees only committed rows: inside a caller's transaction, one.
    side_by_side = not connection.in_atomic_block
    with _read_limits():
        return _report(range_name, start, end, engines, side_by_side, built)


@contextmanager
def _read_limits() -> Iterator[None]:
    with statement_timeout("reading efficiency figures"):
        # JIT compiling the statements (forty sums over bucket positions) cost PostgreSQL
        # 11 s of a 30-day read at 2,000 engines that ran in under one without it. No
        # parallel workers either: the report already reads on two connections at once, and
        # each statement's workers (their start, the Gather Merge's sort) cost more than they
        # saved: 0.80 -> 0.73 s for the default 30-day report at 2,000 engines, 2.79 -> 2.35 s
        # ending at a given second (make bench-efficiency's fleet, 2 cores).
        reads.fetch("SELECT set_config('jit', 'off', true), "
                    "set_config('max_parallel_workers_per_gather', '0', true)", [])
        yield


def default_end(range_name: str, now: datetime | None = None,
                built: dict[str, datetime] | None = None) -> datetime:
    """Where a range without an ``end`` ends: now, or for the ranges the hourly and daily
    rollups answer, the end of the last hour the 1-hour tier holds, when the rollup task keeps
    it current (at most ``ROLLED_UP_LAG`` behind). The figures are then sums of rollup rows
    alone: ending now adds the 1-minute rows and raw seconds of the partial hour at either end,
    3.5 of the 4.5 s of a 30-day report at 2,000 engines on 8,000 GPUs (BENCHMARKS.md).
    ``built``: watermarks(), where the caller has read them."""
    now = now or datetime.now(UTC)
    if range_name in ROLLED_UP:
        hourly = (watermarks() if built is None else built).get("1h")
        if hourly is not None and now - ROLLED_UP_LAG <= hourly <= now:
            return hourly
    return now


def _engines(start: datetime, ids: list[int] | None, model: str | None) -> list[Engine]:
    """The engines named, or those present or seen since the range started: the fields the
    report shows only (building 2,000 whole engines, their configs decoded, took about 0.1 s
    before anything else could start)."""
    found = Engine.objects.select_related("host").only(
        "id", "name", "model", "gpu_uuids", "host_id", "host__hostname")
    if ids is not None:
        found = found.filter(id__in=ids)
    else:
        found = found.filter(Q(present=True) | Q(last_seen__gte=start))
    if model is not None:
        found = found.filter(model=model)
    return list(found.order_by("model", "host__hostname", "name"))


def _report(range_name: str, start: datetime, end: datetime, engines: list[Engine],
            side_by_side: bool, built: dict[str, datetime]) -> Report:
    conf = settings.PITWALL
    reader = _Reader(start, end, built)
    inputs, gpus = reader.inputs(engines, side_by_side)
    layouts = {lay for i in inputs.values() for h in i.histograms.values() for lay in h}
    price = float(conf["GPU_HOUR_PRICE"])
    terms = Terms(
        objective_s={name: objective_s(name) for name in OBJECTIVES},
        target=target(),
        gpu_hour_price=price if price > 0 else None,
        bounds=dict(HistogramLayout.objects.filter(id__in=layouts).values_list("id", "bounds")))
    rows = [EngineRow(e.id, e.name, e.host_id, e.host.hostname, e.model, gpus[e.id],
                      figures(inputs[e.id], terms)) for e in engines]
    resolution, stretches = reader.plan("engine", start, end)
    return Report(range_name, start, end, resolution, stretches, terms.target,
                  {k: v * 1000 for k, v in terms.objective_s.items()}, terms.gpu_hour_price,
                  conf["GPU_HOUR_PRICE_CURRENCY"], reads.energy_metric() is not None,
                  rows, _models(engines, inputs, terms))


def _models(engines: list[Engine], inputs: dict[int, Inputs], terms: Terms) -> list[ModelRow]:
    summed: dict[str, Inputs] = defaultdict(Inputs)
    ids: dict[str, list[int]] = defaultdict(list)
    for e in engines:
        summed[e.model].add(inputs[e.id])
        ids[e.model].append(e.id)
    return [ModelRow(m, ids[m], figures(summed[m], terms)) for m in sorted(summed)]


def _engine_gpus(engines: list[Engine]) -> dict[int, list[int]]:
    """Engine id -> the ids of the GPUs it names, on its own host (GPU uuids are unique, but
    the host must match too, as the alert kinds join them). GPUs removed since still count:
    they did the work of the range."""
    uuids = sorted({u for e in engines for u in e.gpu_uuids or [] if isinstance(u, str)})
    # The uuids as one array parameter: the ORM's IN list of one placeholder each took about
    # 0.15 s of Python for 8,000 GPUs (make bench-efficiency).
    host_id = Gpu._meta.get_field("host").column
    found = {(host, uuid): gid for gid, host, uuid in fetch(
        f"SELECT id, {host_id}, uuid FROM {Gpu._meta.db_table} WHERE uuid = ANY(%s)", [uuids])}
    return {e.id: [found[(e.host_id, u)] for u in e.gpu_uuids or []
                   if (e.host_id, u) in found] for e in engines}


class _Reader:
    """Reads the totals of every engine and GPU at once, a statement per table and stretch;
    plans are made once per entity and window."""

    def __init__(self, start: datetime, end: datetime, built: dict[str, datetime]) -> None:
        self.start, self.end, self.built = start, end, built
        self._plans: dict[tuple, tuple[str, list[Stretch]]] = {}
        self._oldest: dict[str, dict[str, date]] = {}

    def plan(self, entity: str, start: datetime, end: datetime) -> tuple[str, list[Stretch]]:
        key = (entity, start, end)
        if key not in self._plans:
            if entity not in self._oldest:
                self._oldest[entity] = oldest_partitions(entity)  # type: ignore[arg-type]
            self._plans[key] = plan_stretches(entity, start, end,  # type: ignore[arg-type]
                                              self.built, self._oldest[entity])
        return self._plans[key]

    def stretches(self, entity: str, window: str = "range") -> list[Stretch]:
        start = self.start if window == "range" else self.end - BURN_WINDOWS[window]
        return self.plan(entity, start, self.end)[1]

    def inputs(self, engines: list[Engine], side_by_side: bool = False,
               ) -> tuple[dict[int, Inputs], dict[int, list[int]]]:
        """(each engine's inputs, the ids of its GPUs). ``side_by_side``: the GPUs' lookup
        and statements run on a connection of their own while the engines' run on this one
        (they share nothing: two cores instead of one)."""
        ids = [e.id for e in engines]
        self.stretches("gpu")  # planned here: the plans are not shared across threads
        if side_by_side:
            with ThreadPoolExecutor(1) as pool:
                gpu_reads = pool.submit(_on_own_connection, self._gpu_reads, engines,
                                        reading())
                tokens, engine_every, hists = self._engine_reads(ids)
                gpus, power, gpu_every = gpu_reads.result()
        else:
            gpus, power, gpu_every = self._gpu_reads(engines)
            tokens, engine_every, hists = self._engine_reads(ids)
        every = {**_prefixed("engine", engine_every), **_prefixed("gpu", gpu_every)}
        energy = {g: t.counter_rise for g, t in power.items() if t.counter_rows}
        out = {}
        for e in engines:
            i = _tokens(tokens.get(e.id), every.get(("engine", e.id), DEFAULT_INTERVAL_S))
            gpu_dt = {g: every.get(("gpu", g), DEFAULT_INTERVAL_S) for g in gpus[e.id]}
            _add_gpus(i, gpu_dt, power, energy)
            i.histograms = {key: h[e.id] for key, h in hists.items() if e.id in h}
            out[e.id] = i
        return out, gpus

    def _gpu_reads(self, engines: list[Engine]) -> tuple[dict[int, list[int]],
                                                         dict[int, reads.Totals],
                                                         dict[int, float]]:
        gpus = _engine_gpus(engines)  # here: beside the engines' statements, not before them
        gpu_ids = sorted({g for e in engines for g in gpus[e.id]})
        since = self._newest_window("gpu")
        power = reads.value_totals(POWER_METRIC, gpu_ids, self.stretches("gpu"),
                                   reads.energy_metric(), since)
        return gpus, power, self._intervals("gpu", gpu_ids, power if since else {})

    def _engine_reads(self, ids: list[int]) -> tuple[dict[int, reads.Totals], dict[int, float],
                                                     dict[tuple[str, str], dict[int, Layouts]]]:
        hists, range_rows = self._histograms(ids)
        if range_rows is None:  # no histogram read: the tokens alone
            tokens = reads.value_totals(GENERATION, ids, self.stretches("engine"))
        else:
            tokens = reads.value_sums(range_rows)
        # The probe of the newest hourly rows, not the sums' pass: an engine's hourly row is
        # wide (its histograms), and reading the 24 hours before the range's end edge cost
        # more than the probe (make bench-efficiency).
        return tokens, self._intervals("engine", ids, {}), hists

    def _rolled_up(self, entity: str) -> bool:
        return all(s.resolution != "raw" for s in self.stretches(entity))

    def _newest_window(self, entity: str) -> datetime | None:
        """Where a rolled-up range's sums also count the hourly rows the sampling interval is
        read from (reads.newest_window); None where the probe reads them."""
        if not self._rolled_up(entity):
            return None
        return reads.newest_window(self.start, self.stretches(entity))

    def _intervals(self, entity: str, ids: list[int],
                   totals: dict[int, reads.Totals]) -> dict[int, float]:
        """From the sums' pass where it counted an entity's newest hours (the probe of those
        24 hourly rows, 0.16 s for 8,000 GPUs, saved); the probe for the others."""
        out = reads.newest_intervals(totals)
        missing = [k for k in ids if k not in out]
        if missing:
            out.update(reads.sample_intervals(entity, missing,  # type: ignore[arg-type]
                                              self.start, self.end, self._rolled_up(entity)))
        return out

    def _histograms(self, ids: list[int]) -> tuple[dict[tuple[str, str], dict[int, Layouts]],
                                                   list[list[tuple]] | None]:
        """(objective, window) -> engine id -> summed buckets; a window equal to another
        (the 1-hour range and its last hour) is read once. And the rows read for the range,
        which carry the generation rate's sums too (reads.stretch_counts: the wide engine
        rows read once for both, where tokens and histograms took a statement each); None
        where nothing was read (no histogram layout yet)."""
        widest = max((len(b) for b in HistogramLayout.objects.values_list("bounds", flat=True)),
                     default=-1) + 1
        metrics = list(HISTOGRAMS.values())
        by_window: dict[tuple[datetime, datetime], dict] = {}
        # The windows end together: cut at the range's stretch boundaries, their newest
        # stretches are the range's and are read once.
        by_stretch: dict[Stretch, list[tuple]] = {}
        cuts: dict[str, set[datetime]] = defaultdict(set)
        for s in self.stretches("engine"):
            cuts[s.resolution] |= {s.lo, s.hi}

        def read_stretch(s: Stretch) -> list[tuple]:
            if s not in by_stretch:
                by_stretch[s] = reads.stretch_counts(metrics, ids, s, widest, GENERATION)
            return by_stretch[s]

        out = {}
        for window in ("range", *BURN_WINDOWS):
            start = self.start if window == "range" else self.end - BURN_WINDOWS[window]
            if (start, self.end) not in by_window:
                by_window[(start, self.end)] = reads.histogram_counts(
                    metrics, ids, _cut(self.stretches("engine", window), cuts), widest,
                    read_stretch)
            read = by_window[(start, self.end)]
            for objective, metric in HISTOGRAMS.items():
                out[(objective, window)] = read[metric.name]
        if widest < 1 or not metrics:
            return out, None
        if not ids:
            return out, []
        return out, [read_stretch(s) for s in _cut(self.stretches("engine"), cuts)]


def _on_own_connection(read: Callable[[list[Engine]], _T], engines: list[Engine],
                       from_standby: bool) -> _T:
    """``read(engines)`` on this thread's own connection (to the standby where the caller
    reads from it), under the same limits, closed after."""
    try:
        with reading_from_standby() if from_standby else nullcontext(), _read_limits():
            return read(engines)
    finally:
        connections.close_all()  # this thread's: the pool takes them back


def _cut(stretches: list[Stretch], cuts: dict[str, set[datetime]]) -> list[Stretch]:
    """The stretches split where a stretch of the same table starts or ends in ``cuts``:
    the same rows (a row counts in the piece its bucket starts in), shareable pieces."""
    out = []
    for s in stretches:
        edges = [s.lo, *sorted(t for t in cuts[s.resolution] if s.lo < t < s.hi), s.hi]
        out += [Stretch(s.resolution, lo, hi) for lo, hi in zip(edges, edges[1:], strict=False)]
    return out


def _prefixed(entity: str, values: dict[int, float]) -> dict[tuple[str, int], float]:
    return {(entity, k): v for k, v in values.items()}


def _tokens(totals: reads.Totals | None, dt: float) -> Inputs:
    """Each rate sample stands for one sampling interval ``dt``."""
    if totals is None or totals.rows == 0:
        return Inputs()
    return Inputs(tokens=totals.total * dt, tokens_per_s=totals.total / totals.rows,
                  seconds=totals.rows * dt)


def _add_gpus(i: Inputs, gpu_dt: dict[int, float], power: dict[int, reads.Totals],
              energy: dict[int, float]) -> None:
    """GPU-hours, and energy: the counter when every GPU of the engine has it, else power
    integrated (each sample's watts for one sampling interval)."""
    gpu_ids = list(gpu_dt)
    i.gpus = len(gpu_ids)
    i.gpu_seconds = sum(power[g].samples * gpu_dt[g] for g in gpu_ids if g in power)
    if gpu_ids and all(g in energy for g in gpu_ids):
        i.energy_j, i.sources = sum(energy[g] for g in gpu_ids), {ENERGY_COUNTER}
    elif any(g in power and power[g].rows for g in gpu_ids):
        i.energy_j = sum(power[g].total * gpu_dt[g] for g in gpu_ids if g in power)
        i.sources = {POWER}
    if i.sources:
        i.energy_tokens = i.tokens
