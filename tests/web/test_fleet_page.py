from __future__ import annotations

import re

from tests.web.helpers import assert_sends_to_login, page_config


def row_of(response, host) -> str:
    html = response.content.decode()
    match = re.search(rf'<tr data-host-id="{host.id}".*?</tr>', html, re.S)
    assert match, f"no row for {host.hostname}"
    return match.group(0)


def test_it_sends_anonymous_visitors_to_the_login_page(db):
    assert_sends_to_login("/")


def test_it_lists_every_host_with_its_state(operator_client, page_fleet):
    response = operator_client.get("/")
    assert response.status_code == 200
    assert 'data-state="online"' in row_of(response, page_fleet.host)
    assert 'data-state="offline"' in row_of(response, page_fleet.sim_host)


def test_a_simulated_host_is_labelled_simulated(operator_client, page_fleet):
    response = operator_client.get("/")
    assert 'data-simulated="1"' in row_of(response, page_fleet.sim_host)
    assert ">simulated</span>" in row_of(response, page_fleet.sim_host)
    assert ">simulated</span>" not in row_of(response, page_fleet.host)


def test_it_shows_each_gpu_and_engine_with_their_latest_figures(operator_client, latest_samples):
    row = row_of(operator_client.get("/"), latest_samples.host)
    gpu = re.search(rf'data-gpu-id="{latest_samples.gpu0.id}".*?</a>', row, re.S).group(0)
    assert 'style="width:75.0%"' in gpu  # 60 of 80 GiB
    assert ">91%<" in gpu
    engine = re.search(rf'data-engine-id="{latest_samples.engine.id}".*?</a>', row, re.S).group(0)
    assert 'data-field="requests_running" data-fmt="num" title="running">7<' in engine
    assert 'data-field="requests_waiting" data-fmt="num" title="waiting">3<' in engine
    assert ">42%<" in engine


def test_rows_carry_the_figures_the_browser_sorts_by(operator_client, latest_samples):
    row = row_of(operator_client.get("/"), latest_samples.host)
    assert 'data-gpu-util="51.5"' in row  # mean of 91 and 12
    assert 'data-kv="0.42' in row
    assert 'data-waiting="3' in row
    assert 'data-hostname="gpu-node-1"' in row


def test_it_links_to_the_host_gpu_and_engine_pages(operator_client, page_fleet):
    html = operator_client.get("/").content.decode()
    assert f'href="/hosts/{page_fleet.host.id}/"' in html
    assert f'href="/gpus/{page_fleet.gpu0.id}/"' in html
    assert f'href="/engines/{page_fleet.engine.id}/"' in html


def test_it_subscribes_to_the_fleet_group_and_knows_the_online_window(operator_client, page_fleet,
                                                                      settings):
    config = page_config(operator_client.get("/"))
    assert config["groups"] == ["fleet"]
    assert config["ws_path"] == "/ws/live/"
    assert config["online_window_s"] == settings.PITWALL["ONLINE_WINDOW_S"]


def test_a_host_that_never_reported_is_offline_and_never_seen(operator_client, page_fleet):
    page_fleet.host.last_seen = None
    page_fleet.host.save()
    row = row_of(operator_client.get("/"), page_fleet.host)
    assert 'data-state="offline"' in row
    assert 'data-last-seen=""' in row
    assert ">never<" in row


def test_an_empty_fleet_explains_how_to_add_a_host(operator_client):
    assert b"create_agent_token" in operator_client.get("/").content
