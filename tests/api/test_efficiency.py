"""GET /api/v1/efficiency/engines/, /engines/<id>/ and /models/: the figures of a known load
posted through the real ingest app (tests/telemetry/efficiency_data.py), bad parameters, who
may read, and the schema."""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command

from controlplane.fleet.models import Engine
from controlplane.fleet.tokens import issue_api_token
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role
from tests.telemetry.efficiency_data import MODEL, EngineLoad, Load, post

ENGINES, MODELS = "/api/v1/efficiency/engines/", "/api/v1/efficiency/models/"


@pytest.fixture
def load(ingest, host_token) -> Load:
    """Ten minutes ending two minutes ago, 1-s samples: engine A (600 tokens/s) on GPUs 0-1,
    engine B (300 tokens/s) on GPUs 2-3, same model, every GPU at 300 W."""
    t0 = float(int(time.time()) - 720)
    load = Load(t0, 600, [EngineLoad("vllm:8000/0", [0, 1], 600.0),
                          EngineLoad("vllm:8001/0", [2, 3], 300.0)], gpus=4,
                energy_counter=False)
    post(ingest, host_token, load)
    return load


@pytest.fixture
def reader(transactional_db):
    user_with_role("vera", "viewer")
    return bearer_client(issue_api_token("vera", name="tests"))


def ok(client, url: str, **params) -> dict:
    response = client.get(url, params)
    assert response.status_code == 200, response.content
    return response.json()


def test_engines_list_their_figures(reader, load, settings):
    settings.PITWALL = {**settings.PITWALL, "GPU_HOUR_PRICE": 3.0, "GPU_HOUR_PRICE_CURRENCY": "EUR"}
    body = ok(reader, ENGINES)
    assert (body["range"], body["target"]) == ("1h", 0.99)
    assert {s["resolution"] for s in body["stretches"]} == {"raw"}  # no rollup built yet
    assert body["objective_ms"] == {"ttft": 2000.0, "itl": 100.0}
    assert (body["gpu_hour_price"], body["currency"]) == (3.0, "EUR")
    assert body["end"] - body["start"] == pytest.approx(3600)
    a = {e["name"]: e for e in body["engines"]}["vllm:8000/0"]
    assert (a["model"], a["hostname"], a["gpus"], len(a["gpu_ids"])) == (MODEL, "gpu-node-1", 2, 2)
    assert a["generation_tokens"] == pytest.approx(360_000)
    assert a["generation_tokens_per_s"] == pytest.approx(600)
    assert (a["energy_source"], a["energy_j"]) == ("power", pytest.approx(360_000))
    assert a["tokens_per_joule"] == pytest.approx(1.0)
    assert a["gpu_hours"] == pytest.approx(1 / 3)
    assert a["cost"] == pytest.approx(1.0)
    assert a["cost_per_million_tokens"] == pytest.approx(1 / 0.36)
    assert a["ttft"] == {"objective_ms": 2000.0, "attainment": pytest.approx(0.95),
                         "requests": 100, "burn_1h": pytest.approx(5.0),
                         "burn_30d": pytest.approx(5.0)}
    assert a["itl"]["attainment"] == pytest.approx(0.99)


def test_models_sum_their_engines(reader, load):
    (model,) = ok(reader, MODELS)["models"]
    assert (model["model"], len(model["engine_ids"]), model["gpus"]) == (MODEL, 2, 4)
    assert model["generation_tokens"] == pytest.approx(900 * 600)
    assert model["generation_tokens_per_s"] == pytest.approx(900)
    assert model["tokens_per_joule"] == pytest.approx(0.75)  # 540,000 / (4 x 300 W x 600 s)
    assert (model["ttft"]["requests"], model["ttft"]["attainment"]) == (200, pytest.approx(0.95))
    assert (model["cost"], model["cost_per_million_tokens"]) == (None, None)  # no price set


def test_model_filters_by_name(reader, load):
    assert ok(reader, MODELS, model="no/such-model")["models"] == []
    assert len(ok(reader, ENGINES, model=MODEL)["engines"]) == 2


def test_one_engine(reader, load):
    engine = Engine.objects.get(name="vllm:8001/0")
    body = ok(reader, f"{ENGINES}{engine.id}/", range="24h")
    assert body["range"] == "24h"
    assert (body["engine"]["id"], body["engine"]["generation_tokens"]) == (
        engine.id, pytest.approx(300 * 600))


def test_an_unknown_engine_is_404(reader):
    response = reader.get(f"{ENGINES}999999/")
    assert response.status_code == 404
    assert "engine" in response.json()


@pytest.mark.parametrize(("params", "name"), [
    ({"range": "2h"}, "range"),
    ({"range": "30"}, "range"),
    ({"end": "yesterday"}, "end"),
    ({"end": "0001-01-02T00:00:00"}, "end"),  # 30 days before it is no date
    ({"model": "m" * 301}, "model"),
])
def test_bad_parameters_are_400_naming_them(reader, params, name):
    for url in (ENGINES, MODELS):
        response = reader.get(url, params)
        assert response.status_code == 400, response.content
        assert name in response.json()


def test_reading_needs_a_role(transactional_db, anonymous):
    user_with_role("nobody", None)
    no_role = bearer_client(issue_api_token("nobody", name="tests"))
    for url in (ENGINES, MODELS, f"{ENGINES}1/"):
        assert anonymous.get(url).status_code in (401, 403)
        assert no_role.get(url).status_code == 403


def test_the_paths_are_in_the_schema(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    text = out.read_text()
    for path in (ENGINES, f"{ENGINES}{{engine_id}}/", MODELS):
        assert f"  {path}:" in text
    assert "tokens_per_joule" in text and "energy_source" in text
