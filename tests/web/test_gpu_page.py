from __future__ import annotations

from agents.protocol import metrics_of
from tests.web.helpers import assert_sends_to_login, chart_lines, chart_metrics, page_config


def gpu_path(gpu) -> str:
    return f"/gpus/{gpu.id}/"


def test_it_sends_anonymous_visitors_to_the_login_page(page_fleet):
    assert_sends_to_login(gpu_path(page_fleet.gpu0))


def test_an_unknown_gpu_is_not_found(operator_client, page_fleet):
    assert operator_client.get("/gpus/999999/").status_code == 404


def test_it_charts_every_gpu_metric_of_the_catalog(operator_client, page_fleet):
    response = operator_client.get(gpu_path(page_fleet.gpu0))
    assert response.status_code == 200
    assert chart_metrics(response) == {m.name for m in metrics_of("gpu")}


def test_throttle_reasons_are_a_timeline_of_the_last_bitmask_per_bucket(operator_client,
                                                                         page_fleet):
    response = operator_client.get(gpu_path(page_fleet.gpu0))
    assert 'data-chart="throttle" data-kind="timeline"' in response.content.decode()
    assert chart_lines(response, "throttle") == [
        {"metric": "gpu.throttle_reasons", "entity": str(page_fleet.gpu0.id), "stat": "last"}]
    names = [r["name"] for r in page_config(response)["throttle_reasons"]]
    assert "HW power brake" in names and "SW power cap" in names


def test_it_follows_its_host_group_and_links_its_host_and_engine(operator_client, page_fleet):
    response = operator_client.get(gpu_path(page_fleet.gpu1))
    assert page_config(response)["groups"] == [f"host:{page_fleet.host.id}"]
    html = response.content.decode()
    assert f'href="/hosts/{page_fleet.host.id}/"' in html
    assert f'href="/engines/{page_fleet.engine.id}/"' in html


def test_a_simulated_gpu_is_labelled_simulated(operator_client, page_fleet):
    assert b">simulated</span>" in operator_client.get(gpu_path(page_fleet.sim_gpu)).content
    assert b">simulated</span>" not in operator_client.get(gpu_path(page_fleet.gpu0)).content
