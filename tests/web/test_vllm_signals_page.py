"""The engine page charts vLLM's finer signals (requests by finish and wait reason, speculative
decoding, LoRA, batch and length histograms): a chart per group, each line a metric of the
catalog for this engine."""

from __future__ import annotations

from agents.protocol import METRICS
from tests.web.helpers import chart_lines, chart_metrics

SIGNALS = {
    "finished-reasons": ["engine.finished_stop_per_s", "engine.finished_length_per_s",
                         "engine.finished_abort_per_s", "engine.finished_error_per_s"],
    "waiting-reasons": ["engine.requests_waiting_capacity", "engine.requests_waiting_deferred"],
    "iteration-tokens": ["engine.iteration_tokens"] * 3,
    "lengths": ["engine.prompt_length_tokens"] * 2 + ["engine.generation_length_tokens"] * 2,
    "prefill-computed": ["engine.prefill_kv_computed_tokens"] * 3,
    "spec-tokens": ["engine.spec_draft_tokens_per_s", "engine.spec_accepted_tokens_per_s"],
    "spec-acceptance": ["engine.spec_acceptance_rate"],
    "lora": ["engine.lora_running", "engine.lora_waiting"],
}


def test_each_signal_group_has_its_chart_for_this_engine(operator_client, page_fleet):
    engine = page_fleet.engine
    response = operator_client.get(f"/engines/{engine.id}/")
    assert response.status_code == 200
    for chart, metrics in SIGNALS.items():
        lines = chart_lines(response, chart)
        assert [line["metric"] for line in lines] == metrics, chart
        assert {line["entity"] for line in lines} == {str(engine.id)}
        assert len({METRICS[m].unit for m in metrics}) == 1, chart  # one axis per chart
    assert {m for metrics in SIGNALS.values() for m in metrics} <= chart_metrics(response)


def test_token_histograms_are_drawn_as_quantiles_with_their_own_unit(operator_client,
                                                                       page_fleet):
    response = operator_client.get(f"/engines/{page_fleet.engine.id}/")
    lengths = chart_lines(response, "lengths")
    assert [(line["quantile"], line["label"]) for line in lengths] == [
        (0.5, "prompt p50"), (0.9, "prompt p90"), (0.5, "generation p50"),
        (0.9, "generation p90")]
    assert [line["quantile"] for line in chart_lines(response, "iteration-tokens")] == [
        0.5, 0.9, 0.99]
    html = response.content.decode()
    assert 'id="chart-iteration-tokens"' in html
    assert 'data-chart="iteration-tokens" data-kind="line" data-unit="tokens"' in html
