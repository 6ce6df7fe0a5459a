"""vLLM's finer signals (requests by finish and wait reason, speculative decoding, LoRA, batch
and length histograms) end to end: recorded /metrics pages through the agent's collector,
a batch through the real ingest app into PostgreSQL, the stored values, the 1-minute rollups,
and GET /api/v1/series/ reading them back."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from agents.protocol import METRICS, metrics_of
from controlplane.fleet.models import Engine
from controlplane.telemetry import rollups
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.series import histogram_quantile
from tests.agents.vllm_samples import bump, observe, sample_text
from tests.agents.vllm_signal_pages import lora_block, spec_decode_block, two_scrapes
from tests.telemetry.factories import batch, sample
from tests.telemetry.rollup_data import start_rollups_at

V0_33 = "v1-synthetic-vllm-0.33.0.txt"
V0_10 = "v1-synthetic-vllm-0.10.2.txt"
# Those signals in the engine's catalog, by the names other parts rely on.
SIGNALS = (
    "engine.finished_stop_per_s", "engine.finished_length_per_s", "engine.finished_abort_per_s",
    "engine.finished_error_per_s", "engine.requests_waiting_capacity",
    "engine.requests_waiting_deferred", "engine.spec_draft_tokens_per_s",
    "engine.spec_accepted_tokens_per_s", "engine.spec_acceptance_rate", "engine.lora_running",
    "engine.lora_waiting", "engine.iteration_tokens", "engine.prompt_length_tokens",
    "engine.generation_length_tokens", "engine.prefill_kv_computed_tokens")
BOOT = str(uuid.uuid4())  # one agent boot: its batches differ by seq
HISTOGRAMS = [name for name in SIGNALS if METRICS[name].kind == "histogram"]
SCALARS = [name for name in SIGNALS if METRICS[name].kind != "histogram"]


def busy_pages() -> tuple[str, str]:
    """Two scrapes, 2 s apart, of a 0.33 engine with speculative decoding and LoRA on."""
    base = sample_text(V0_33)
    base = bump(base, "vllm:num_requests_waiting_by_reason", 5, reason="deferred")
    lora = lora_block(("2", "a", "a,b", 1_700_000_000.0))
    before = base + spec_decode_block(100, 50) + lora
    after = base
    for reason, n in (("stop", 8), ("length", 4), ("abort", 2), ("error", 2)):
        after = bump(after, "vllm:request_success_total", n, finished_reason=reason)
    for family, value in (("vllm:iteration_tokens_total", 300),
                          ("vllm:request_prompt_tokens", 900),
                          ("vllm:request_generation_tokens", 150),
                          ("vllm:request_prefill_kv_computed_tokens", 400)):
        after = observe(after, family, value, times=4)
    after += spec_decode_block(100 + 600, 50 + 450) + lora
    return before, after


def engine_values(pages: tuple[str, str] | None = None) -> dict:
    """The engine sample the agent's collector makes of the second page."""
    values = two_scrapes(*(pages or busy_pages()))
    assert values["name"] == "vllm:8000/0"  # the engine the factories' inventory names
    return values


def post(ingest, token, values: dict, ts: float, seq: int = 1) -> None:
    item = sample(ts)
    item["engines"] = [values]
    code, reply = ingest.post(batch(seq, boot_id=BOOT, samples=[item]), token)
    assert (code, reply["accepted"]) == (200, 1), reply


def stored(columns: list[str]) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(columns)} FROM telemetry_engine_sample")
        (row,) = cursor.fetchall()
    return row


def test_the_collected_signals_are_stored_each_in_its_column(ingest, host_token):
    values = engine_values()
    post(ingest, host_token, values, time.time() - 5)
    keys = [METRICS[name].key for name in SCALARS]
    assert dict(zip(keys, stored(keys), strict=True)) == pytest.approx({
        "finished_stop_per_s": 4.0, "finished_length_per_s": 2.0, "finished_abort_per_s": 1.0,
        "finished_error_per_s": 1.0, "requests_waiting_capacity": values[
            "requests_waiting_capacity"], "requests_waiting_deferred": 5.0,
        "spec_draft_tokens_per_s": 300.0, "spec_accepted_tokens_per_s": 225.0,
        "spec_acceptance_rate": 0.75, "lora_running": 2, "lora_waiting": 1})
    for name in HISTOGRAMS:
        key = METRICS[name].key
        layout, counts, total = stored([f"{key}_layout", f"{key}_counts", f"{key}_sum"])
        assert HistogramLayout.objects.get(id=layout).bounds == values[key]["le"]
        assert counts == values[key]["counts"] and sum(counts) == 4
        assert total == pytest.approx(values[key]["sum"])


def test_signals_a_release_lacks_are_stored_null_not_zero(ingest, host_token):
    # 0.10.2: no error reason, no waiting-by-reason, no prefill_kv_computed; no spec, no LoRA.
    before = sample_text(V0_10)
    after = bump(before, "vllm:request_success_total", 2, finished_reason="stop")
    values = engine_values((before, after))
    post(ingest, host_token, values, time.time() - 5)
    absent = ["finished_error_per_s", "requests_waiting_capacity", "requests_waiting_deferred",
              "spec_draft_tokens_per_s", "spec_acceptance_rate", "lora_running",
              "prefill_kv_computed_tokens_counts", "prefill_kv_computed_tokens_layout"]
    assert stored(absent) == (None,) * len(absent)
    assert stored(["finished_stop_per_s", "finished_length_per_s"]) == (1.0, 0.0)


def series(api, engine: Engine, metric: str, start: datetime, end: datetime, **extra) -> dict:
    response = api.get("/api/v1/series/", {"metric": metric, "entity": engine.id,
                                           "start": start.isoformat(),
                                           "end": end.isoformat(), **extra})
    assert response.status_code == 200, response.content
    return response.json()


def test_the_series_api_reads_every_new_signal_back(ingest, host_token, api):
    values = engine_values()
    ts = time.time() - 5
    post(ingest, host_token, values, ts)
    engine = Engine.objects.get(name="vllm:8000/0")
    start, end = (datetime.fromtimestamp(ts, UTC) + timedelta(seconds=s) for s in (-60, 60))
    for name in SCALARS:
        body = series(api, engine, name, start, end)
        (only,) = body["series"]
        assert [value for _, value in only["points"]] == [pytest.approx(values[
            METRICS[name].key])], name
        assert body["unit"] == METRICS[name].unit
    for name in HISTOGRAMS:
        histogram = values[METRICS[name].key]
        body = series(api, engine, name, start, end, quantile=0.5)
        (only,) = body["series"]
        want = histogram_quantile(0.5, histogram["le"], histogram["counts"])
        assert [value for _, value in only["points"]] == [pytest.approx(want)], name
        assert (body["unit"], body["kind"]) == ("tokens", "histogram")


def test_the_minute_rollups_keep_the_new_signals(ingest, host_token):
    values = engine_values()
    minute = datetime.fromtimestamp((time.time() - 300) // 60 * 60, UTC)
    for i in range(3):  # three samples in one settled minute
        post(ingest, host_token, values, (minute + timedelta(seconds=10 + 10 * i)).timestamp(),
             seq=i + 1)
    start_rollups_at(minute)
    rollups.run(now=minute + timedelta(minutes=3))
    table = rollups.TABLES["1m"]["engine"]
    wanted = {m.name: table.column(m, "avg").name for m in metrics_of("engine")
              if m.name in SCALARS}
    wanted |= {name: table.column(METRICS[name], "counts").name for name in HISTOGRAMS}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT ts, {', '.join(wanted.values())} FROM {table.name}")
        (row,) = cursor.fetchall()
    assert row[0] == minute
    got = dict(zip(wanted, row[1:], strict=True))
    for name in SCALARS:
        assert got[name] == pytest.approx(values[METRICS[name].key]), name
    for name in HISTOGRAMS:
        assert got[name] == [3 * c for c in values[METRICS[name].key]["counts"]], name
