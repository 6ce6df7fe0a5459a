from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from controlplane.fleet.models import Engine, Gpu
from controlplane.fleet.queries import is_online
from controlplane.telemetry.stall import stalled_engines
from controlplane.tuning.models import State
from controlplane.web.charts import engine_charts
from controlplane.web.latest import latest
from controlplane.web.views.access import read_fleet
from controlplane.web.views.common import page_context
from controlplane.web.views.suggestions import annotated


def config_rows(config: dict) -> list[tuple[str, object]]:
    """The engine's config as sorted (name, value) rows: the flags the agent read from the
    server's command line (``args``) as ``args.<name>`` rows; other nested values as they are."""
    if not isinstance(config, dict):
        return []
    rows = [(k, v) for k, v in config.items() if not (k == "args" and isinstance(v, dict))]
    if isinstance(config.get("args"), dict):
        rows += [(f"args.{name}", value) for name, value in config["args"].items()]
    return sorted(rows, key=lambda row: str(row[0]))


def open_suggestions(request: HttpRequest, engine: Engine) -> list | None:
    """The engine's open suggestions (a deployment's or a report), for those who may read them;
    None: the user may not."""
    if not request.user.has_perm("tuning.view_suggestion"):
        return None
    return annotated(engine.suggestions.filter(state=State.OPEN)
                     .select_related("deployment__host", "engine__host", "decided_by"))


@read_fleet
def engine(request: HttpRequest, engine_id: int) -> HttpResponse:
    engine = get_object_or_404(Engine.objects.select_related("host"), pk=engine_id)
    # Its own host's GPUs only: a UUID another host reports is not this engine's.
    gpus = Gpu.objects.filter(host=engine.host, uuid__in=engine.gpu_uuids or []).order_by("index")
    context = page_context(
        request, "engine", [f"engine:{engine.id}"], engine=engine, host=engine.host,
        online=is_online(engine.last_seen), gpus=list(gpus),
        stalled_since=stalled_engines([engine.id]).get(engine.id),
        values=latest("engine", [engine.id])[engine.id],
        config=config_rows(engine.config), charts=engine_charts(engine),
        suggestions=open_suggestions(request, engine),
        tuning_window_min=settings.PITWALL["TUNING_WINDOW_S"] // 60,
        can_edit=request.user.has_perm("tuning.decide_suggestion"))
    return render(request, "web/engine.html", context)
