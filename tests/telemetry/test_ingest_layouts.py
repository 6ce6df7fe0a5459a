"""Histogram bucket layouts are capped per host: one token cannot fill the table."""

from __future__ import annotations

import time

import pytest

from controlplane.fleet.tokens import issue_agent_token
from controlplane.telemetry.models import HistogramLayout
from tests.telemetry.factories import batch, refused, sample, stored_rows


def with_layouts(ts: float, layouts: list[list[float]]) -> dict:
    """A sample whose engine sends one histogram per layout (ttft, itl, e2e, queue)."""
    item = sample(ts)
    engine = item["engines"][0]
    for key, le in zip(("ttft_seconds", "itl_seconds", "e2e_seconds", "queue_seconds"),
                       layouts, strict=False):
        engine[key] = {"le": le, "counts": [1] * (len(le) + 1), "sum": 1.0}
    return item


@pytest.fixture
def two_layouts_per_host(settings):
    settings.PITWALL = {**settings.PITWALL, "MAX_HISTOGRAM_LAYOUTS_PER_HOST": 2}


def test_a_host_cannot_register_more_histogram_layouts_than_the_cap(two_layouts_per_host,
                                                                    ingest, host_token):
    now = time.time()
    ok = batch(1, samples=[with_layouts(now - 1, [[0.1, 1.0], [0.2, 2.0]])])
    assert ingest.post(ok, host_token)[0] == 200
    layouts = HistogramLayout.objects.count()
    rows = stored_rows()
    body = batch(2, samples=[with_layouts(now, [[0.1, 1.0], [0.2, 2.0], [0.3, 3.0]])])
    reply = refused(ingest, body, host_token, 400, "samples[0].engines[0].e2e_seconds.le")
    assert "MAX_HISTOGRAM_LAYOUTS_PER_HOST" in reply["error"]
    assert HistogramLayout.objects.count() == layouts
    assert stored_rows() == rows
    # The layouts it has keep working, from this process's cache and from a fresh one.
    again = batch(3, samples=[with_layouts(now + 1, [[0.2, 2.0], [0.1, 1.0]])])
    assert ingest.post(again, host_token)[0] == 200
    ingest.app.layouts.__init__()
    assert ingest.post(batch(4, samples=[with_layouts(now + 2, [[0.1, 1.0]])]),
                       host_token)[0] == 200


def test_the_layout_cap_counts_each_host_apart(two_layouts_per_host, ingest, host_token):
    now = time.time()
    mine = [[0.1, 1.0], [0.2, 2.0]]
    assert ingest.post(batch(1, samples=[with_layouts(now, mine)]), host_token)[0] == 200
    other, _ = issue_agent_token("gpu-node-2")
    theirs = batch(1, samples=[with_layouts(now, [[0.1, 1.0], [0.5, 5.0]])],
                   hostname="gpu-node-2")
    for item in theirs["samples"]:
        for i, gpu in enumerate(item["gpus"]):
            gpu["uuid"] = f"GPU-gpu-node-2-{i}"
    assert ingest.post(theirs, other)[0] == 200  # a layout shared with host 1 counts for both


def test_one_request_cannot_register_a_flood_of_layouts(two_layouts_per_host, ingest,
                                                       host_token):
    now = time.time()
    before = HistogramLayout.objects.count()
    samples = [with_layouts(now - i, [[0.1 * (i + 1), 9.0 + i]]) for i in range(50)]
    refused(ingest, batch(samples=samples), host_token, 400, "samples[2].engines[0]"
            ".ttft_seconds.le")
    assert HistogramLayout.objects.count() == before
