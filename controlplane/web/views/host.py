from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from agents.nvml_bits import Reason, decode
from controlplane.fleet import host_labels
from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.fleet.queries import is_online
from controlplane.web.charts import host_charts
from controlplane.web.forms import HostLabelsForm
from controlplane.web.latest import Values, latest, latest_procs
from controlplane.web.numa import numa_panel, placements
from controlplane.web.views.access import needs, read_fleet
from controlplane.web.views.common import page_context


@dataclass
class GpuRow:
    gpu: Gpu
    values: Values

    @property
    def reasons(self) -> list[Reason]:
        mask = self.values.get("throttle_reasons")
        return decode(int(mask)) if mask is not None else []


def gpu_rows(gpus: list[Gpu]) -> list[GpuRow]:
    values = latest("gpu", [g.id for g in gpus])
    return [GpuRow(g, values[g.id]) for g in gpus]


def proc_rows(procs: list[Values], engines: list[Engine], gpus: list[Gpu]) -> list[dict]:
    """Each process's latest sample beside where it runs (engine, CPUs, NUMA nodes)."""
    placed = placements(procs, {e.id: e for e in engines}, {g.uuid: g for g in gpus})
    return [{"values": v, "placement": p} for v, p in zip(procs, placed, strict=True)]


CHANGE_HOST = "fleet.change_host"
label_access = needs("fleet.view_host", CHANGE_HOST)


@read_fleet
def host(request: HttpRequest, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_id)
    return _render(request, host, HostLabelsForm(initial={"labels": host.labels}))


@label_access
def host_labels_change(request: HttpRequest, host_id: int) -> HttpResponse:
    """POST: the host's own labels, replaced whole (400 naming the field, nothing stored)."""
    host = get_object_or_404(Host, pk=host_id)
    if request.method != "POST":
        return redirect(reverse("web:host", args=[host.pk]) + "#labels")
    form = HostLabelsForm(request.POST)
    if not form.is_valid():
        return _render(request, host, form, status=400)
    changed = host_labels.set_labels(host, form.cleaned_data["labels"])
    messages.success(request, "Labels saved." if changed else "The labels were these already.")
    return redirect(reverse("web:host", args=[host.pk]) + "#labels")


def _render(request: HttpRequest, host: Host, label_form: HostLabelsForm,
            status: int = 200) -> HttpResponse:
    gpus = list(host.gpus.filter(present=True))
    engines = list(host.engines.filter(present=True))
    procs = latest_procs(host.id)
    labels = {f"gpu:{g.id}": f"GPU {g.index}" for g in gpus}
    context = page_context(
        request, "host", [f"host:{host.id}"], labels=labels, host=host,
        online=is_online(host.last_seen),
        values=latest("host", [host.id])[host.id], gpus=gpu_rows(gpus),
        engines=engines, procs=proc_rows(procs, engines, gpus),
        numa=numa_panel(host, gpus, engines, procs), charts=host_charts(host, gpus=bool(gpus)),
        label_form=label_form, can_label=request.user.has_perm(CHANGE_HOST))
    return render(request, "web/host.html", context, status=status)
