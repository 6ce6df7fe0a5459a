from __future__ import annotations

import re

from tests.web.helpers import (
    assert_sends_to_login,
    chart_lines,
    chart_metrics,
    host_path,
    page_config,
)


def test_it_sends_anonymous_visitors_to_the_login_page(page_fleet):
    assert_sends_to_login(host_path(page_fleet.host))


def test_an_unknown_host_is_not_found(operator_client, page_fleet):
    assert operator_client.get("/hosts/999999/").status_code == 404
    assert operator_client.get("/hosts/99999999999/").status_code == 404


def test_it_charts_cpu_per_core_memory_throttling_gpus_and_processes(operator_client, page_fleet):
    response = operator_client.get(host_path(page_fleet.host))
    assert response.status_code == 200
    assert {"host.cpu_pct", "host.cpu_core_pct", "host.mem_used_bytes", "host.cpu_throttled_pct",
            "gpu.util_pct", "gpu.mem_used_bytes", "gpu.temp_c", "gpu.power_w",
            "gpu.sm_clock_mhz", "gpu.mem_clock_mhz", "proc.cpu_pct",
            "proc.rss_bytes"} <= chart_metrics(response)
    assert 'data-chart="cpu-cores" data-kind="heatmap"' in response.content.decode()


def test_gpu_and_process_charts_ask_for_every_entity_of_the_host_at_once(operator_client,
                                                                         page_fleet):
    response = operator_client.get(host_path(page_fleet.host))
    every = page_fleet.host.id
    assert chart_lines(response, "gpu-util") == [{"metric": "gpu.util_pct", "host": every}]
    assert chart_lines(response, "proc-rss") == [{"metric": "proc.rss_bytes", "host": every}]


def test_it_subscribes_to_its_host_group(operator_client, page_fleet):
    config = page_config(operator_client.get(host_path(page_fleet.host)))
    assert config["groups"] == [f"host:{page_fleet.host.id}"]
    assert config["labels"][f"gpu:{page_fleet.gpu1.id}"] == "GPU 1"


def test_the_numa_panel_puts_each_gpu_and_process_beside_the_cpus_of_its_node(
        operator_client, latest_samples):
    html = operator_client.get(host_path(latest_samples.host)).content.decode()
    node0 = re.search(r'<tr data-numa-node="0">.*?</tr>', html, re.S).group(0)
    node1 = re.search(r'<tr data-numa-node="1">.*?</tr>', html, re.S).group(0)
    assert "<code>0-3</code>" in node0 and "<code>4-7</code>" in node1
    assert f'data-gpu-id="{latest_samples.gpu0.id}"' in node0
    assert f'data-gpu-id="{latest_samples.gpu1.id}"' in node1
    # The process runs on node 0 while its engine's GPU is on node 1: flagged.
    assert 'data-pid="4242"' in node0 and "GPUs on node 1" in node0


def test_the_process_table_shows_affinity_and_the_cross_numa_warning(operator_client,
                                                                      latest_samples):
    html = operator_client.get(host_path(latest_samples.host)).content.decode()
    row = re.search(r'<tr data-pid="4242">.*?</tr>', html, re.S).group(0)
    assert "vllm:8000/0" in row and "<code>0-3</code>" in row and "cross-NUMA" in row
    assert ">3.0 GiB<" in row and ">99%<" in row


def test_each_gpu_shows_memory_power_and_decoded_throttle_reasons(operator_client, latest_samples):
    html = operator_client.get(host_path(latest_samples.host)).content.decode()
    row = re.search(rf'<tr data-gpu-id="{latest_samples.gpu0.id}">.*?</tr>', html, re.S).group(0)
    assert ">60.0 GiB<" in row and ">80.0 GiB<" in row and 'style="width:75.0%"' in row
    assert ">64 °C<" in row and ">512<" in row and ">700<" in row
    assert '<span class="chip">SW power cap</span>' in row
    assert '<span class="chip warn">HW thermal</span>' in row
    idle = re.search(rf'<tr data-gpu-id="{latest_samples.gpu1.id}">.*?</tr>', html, re.S).group(0)
    assert ">none<" in idle


def test_a_simulated_host_is_labelled_simulated(operator_client, page_fleet):
    html = operator_client.get(host_path(page_fleet.sim_host)).content.decode()
    assert "<span class=\"badge sim\" data-simulated>simulated</span>" in html
    assert ">offline</span>" in html
    assert "data-simulated" not in operator_client.get(host_path(page_fleet.host)).content.decode()


def test_a_host_without_gpus_shows_no_gpu_charts(operator_client, page_fleet):
    page_fleet.host.gpus.all().delete()
    response = operator_client.get(host_path(page_fleet.host))
    assert not {m for m in chart_metrics(response) if m.startswith("gpu.")}
    assert "No GPU on this host." in response.content.decode()
