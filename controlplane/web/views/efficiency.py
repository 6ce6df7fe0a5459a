"""The efficiency page: per model and per engine, tokens, energy, cost and objectives over a
range (the figures of GET /api/v1/efficiency/…, rendered on the server)."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from controlplane.telemetry import efficiency
from controlplane.telemetry.efficiency.figures import Attainment, Figures
from controlplane.telemetry.series import QueryTimeout
from controlplane.web.charts import Chart, Line
from controlplane.web.views.access import read_fleet

DASH = "–"
RANGE_LABELS = {"1h": "1 h", "24h": "24 h", "7d": "7 d", "30d": "30 d"}
SOURCE_LABELS = {"energy_counter": "energy counter", "power": "power × time",
                 "mixed": "counter and power"}
TIER_LABELS = {"raw": "raw samples", "1m": "1-minute rollups", "1h": "1-hour rollups",
               "1d": "1-day rollups"}
CHARTED_ENGINES = 12  # the busiest ones: a fleet's thousand lines would read as noise


@dataclass(frozen=True)
class Objective:
    """One objective's cells: attainment against the target, and the two burn rates."""

    attainment: str
    meets: bool | None
    requests: int
    burn_1h: str
    burn_30d: str
    burning: bool  # the 1-hour burn spends the budget faster than it lasts


@dataclass(frozen=True)
class Row:
    tokens_per_s: str
    tokens: str
    tokens_per_joule: str
    source: str
    gpus: int
    gpu_hours: str
    cost_per_million: str
    ttft: Objective
    itl: Objective

    @property
    def objectives(self) -> list[tuple[str, Objective]]:
        return [("ttft", self.ttft), ("itl", self.itl)]


@read_fleet
def efficiency_page(request: HttpRequest) -> HttpResponse:
    name = request.GET.get("range", efficiency.DEFAULT_RANGE)
    if name not in efficiency.RANGES:
        name = efficiency.DEFAULT_RANGE  # a stale link still opens the page
    try:
        report = efficiency.report(name)
    except QueryTimeout as exc:
        return render(request, "web/efficiency.html", {
            "error": str(exc), "range_name": name, "ranges": RANGE_LABELS,
            "page_config": _page_config(0.0, 0.0)}, status=503)
    sources = {e.figures.energy_source for e in report.engines} - {None}
    context = {
        "report": report, "range_name": name, "ranges": RANGE_LABELS,
        "tiers": tiers_read(report),
        "range_label": RANGE_LABELS[name],
        "models": [(m, row(m.figures, report.target)) for m in report.models],
        "engines": [(e, row(e.figures, report.target)) for e in report.engines],
        "sources": sorted(SOURCE_LABELS[s] for s in sources),
        "target_pct": _pct(report.target, 2),
        "chart": tokens_chart(report.engines),
        "page_config": _page_config(report.start.timestamp(), report.end.timestamp()),
    }
    return render(request, "web/efficiency.html", context)


def _page_config(start: float, end: float) -> dict:
    """What efficiency.js reads: where the series API is, and the range the chart shows."""
    return {"page": "efficiency", "series_url": reverse("series"),
            "range": {"from": start, "to": end}}


def tokens_chart(engines: list[efficiency.EngineRow]) -> Chart | None:
    busiest = sorted((e for e in engines if e.figures.generation_tokens > 0),
                     key=lambda e: -e.figures.generation_tokens)[:CHARTED_ENGINES]
    if not busiest:
        return None
    lines = tuple(Line("engine.generation_tokens_per_s", entity=str(e.id),
                       label=f"{e.name} · {e.hostname}") for e in busiest)
    title = "Generation tokens/s" + (f", the {len(busiest)} busiest engines"
                                     if len(engines) > len(busiest) else "")
    return Chart("efficiency-tokens", title, lines, wide=True)


def tiers_read(report: efficiency.Report) -> str:
    """What the figures were read from, coarsest first: "1-hour rollups, then 1-minute
    rollups and raw samples at the edges"."""
    read = [r for r in ("1d", "1h", "1m", "raw")
            if any(s.resolution == r for s in report.stretches)]
    if not read:
        return TIER_LABELS["raw"]
    head, rest = TIER_LABELS[read[0]], [TIER_LABELS[r] for r in read[1:]]
    return f"{head}, with {' and '.join(rest)} at the edges" if rest else head


def row(f: Figures, target: float) -> Row:
    return Row(
        tokens_per_s=_num(f.generation_tokens_per_s), tokens=_num(f.generation_tokens),
        tokens_per_joule=_num(f.tokens_per_joule, 3),
        source=SOURCE_LABELS.get(f.energy_source or "", DASH), gpus=f.gpus,
        gpu_hours=_num(f.gpu_hours, 2), cost_per_million=_num(f.cost_per_million_tokens, 2),
        ttft=objective(f.ttft, target), itl=objective(f.itl, target))


def objective(a: Attainment, target: float) -> Objective:
    return Objective(
        attainment=_pct(a.attainment, 2),
        meets=None if a.attainment is None else a.attainment >= target,
        requests=a.requests, burn_1h=_burn(a.burn_1h), burn_30d=_burn(a.burn_30d),
        burning=a.burn_1h is not None and a.burn_1h > 1)


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return DASH
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _pct(value: float | None, digits: int) -> str:
    if value is None:
        return DASH
    return f"{value * 100:.{digits}f} %".replace(".00 %", " %")


def _burn(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f}×"
