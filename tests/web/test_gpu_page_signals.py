"""The GPU page's new signals: a lost GPU says so, energy since the driver loaded in kWh, and the
charts of NVLink, error counters and health flags."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from tests.api.helpers import insert_samples
from tests.web.helpers import chart_lines


def gpu_path(gpu) -> str:
    return f"/gpus/{gpu.id}/"


def latest(gpu, **values) -> None:
    insert_samples("gpu", [{"gpu_id": gpu.id, "ts": timezone.now() - timedelta(seconds=2),
                            **values}])


def test_a_gpu_nvml_reports_lost_carries_a_lost_badge(operator_client, page_fleet):
    latest(page_fleet.gpu0, lost=1, xid_last=79)
    latest(page_fleet.gpu1, lost=0, util_pct=50.0)

    lost = operator_client.get(gpu_path(page_fleet.gpu0)).content.decode()
    healthy = operator_client.get(gpu_path(page_fleet.gpu1)).content.decode()

    assert 'class="badge offline" title="NVML reports this GPU lost' in lost
    assert ">lost</span>" in lost and ">lost</span>" not in healthy


def test_a_simulated_lost_gpu_says_that_nvml_is_simulated(operator_client, page_fleet):
    latest(page_fleet.sim_gpu, lost=1)
    html = operator_client.get(gpu_path(page_fleet.sim_gpu)).content.decode()
    assert "(fallen off the bus); NVML is simulated" in html


def test_energy_since_the_driver_loaded_reads_in_kwh(operator_client, page_fleet):
    latest(page_fleet.gpu0, energy_j=7.2e8)  # 200 kWh
    latest(page_fleet.gpu1, util_pct=10.0)  # no energy counter (a pre-Volta GPU): a dash

    assert ">200 kWh</dd>" in operator_client.get(gpu_path(page_fleet.gpu0)).content.decode()
    html = operator_client.get(gpu_path(page_fleet.gpu1)).content.decode()
    assert "Energy since driver load</dt><dd" in html and ">0 kWh<" not in html


def test_flags_chart_the_max_of_each_bucket_so_a_short_loss_shows(operator_client, page_fleet):
    response = operator_client.get(gpu_path(page_fleet.gpu0))
    g = str(page_fleet.gpu0.id)

    assert chart_lines(response, "health-flags") == [
        {"metric": m, "entity": g, "label": label, "stat": "max"} for m, label in (
            ("gpu.lost", "lost (NVML)"), ("gpu.remapped_rows_pending", "remap pending"),
            ("gpu.remapped_rows_failed", "remap failed"))]
    assert [line["metric"] for line in chart_lines(response, "nvlink")] == [
        "gpu.nvlink_rx_bps", "gpu.nvlink_tx_bps"]
