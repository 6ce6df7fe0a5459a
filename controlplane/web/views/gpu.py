from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from agents.nvml_bits import decode
from controlplane.fleet.models import Gpu
from controlplane.fleet.queries import is_online
from controlplane.web.charts import gpu_charts
from controlplane.web.latest import latest
from controlplane.web.views.access import read_fleet
from controlplane.web.views.common import page_context


@read_fleet
def gpu(request: HttpRequest, gpu_id: int) -> HttpResponse:
    gpu = get_object_or_404(Gpu.objects.select_related("host"), pk=gpu_id)
    values = latest("gpu", [gpu.id])[gpu.id]
    mask = values.get("throttle_reasons")
    energy = values.get("energy_j")  # joules since the driver loaded
    # The GPU's samples travel in its host's live events (docs/live.md).
    context = page_context(
        request, "gpu", [f"host:{gpu.host_id}"], gpu=gpu, host=gpu.host,
        online=is_online(gpu.host.last_seen), values=values,
        reasons=decode(int(mask)) if mask is not None else [],
        energy_kwh=energy / 3.6e6 if energy is not None else None,
        engines=[e for e in gpu.host.engines.filter(present=True) if gpu.uuid in e.gpu_uuids],
        charts=gpu_charts(gpu))
    return render(request, "web/gpu.html", context)
