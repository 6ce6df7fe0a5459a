"""The health and interconnect signals (energy, NVLink, corrected ECC, remapped rows, PCIe
replays) on a hand-built NVML module: NVML's answers in NVML's types and units, devices and
pynvml releases that lack a query (absent, never 0), fallbacks, and counters turned into rates.

The answers are written by hand in the shapes pynvml returns (tests/agents/nvml_handbuilt.py),
not recorded on hardware: no GPU here.
"""

from __future__ import annotations

import pynvml
import pytest

from agents.collectors.nvml import NvmlCollector
from agents.collectors.nvml_values import ALL_LINKS
from tests.agents.nvml_handbuilt import NOT_SUPPORTED, Board, HandBuiltNvml

NEW_KEYS = {"energy_j", "nvlink_tx_bps", "nvlink_rx_bps", "nvlink_errors_total", "ecc_sbe_total",
            "remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending",
            "remapped_rows_failed", "pcie_replays_total"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def collect(nvml: HandBuiltNvml, times: int = 1, step: float = 1.0,
            change=None) -> tuple[list[dict], list[str]]:
    warnings: list[str] = []
    clock = Clock()
    collector = NvmlCollector(nvml, warn=warnings.append, clock=clock)
    samples = []
    for i in range(times):
        if change is not None:
            change(i)
        samples.append(collector.collect()[0])
        clock.now += step
    return samples, warnings


def test_an_h100_answers_every_signal_in_the_catalogs_units():
    board = Board()
    (first, second), warnings = collect(HandBuiltNvml([board]), times=2, step=2.0,
                                        change=lambda i: setattr(board, "tx_kib",
                                                                 board.tx_kib + i * 1000))

    assert first["energy_j"] == pytest.approx(1_234_567.890)  # mJ -> J
    assert first["nvlink_errors_total"] == 18 * (1 + 0 + 2 + 0)  # not the ECC lane counter
    assert first["ecc_sbe_total"] == 7 and first["ecc_dbe_total"] == 0
    assert (first["remapped_rows_correctable"], first["remapped_rows_uncorrectable"],
            first["remapped_rows_pending"], first["remapped_rows_failed"]) == (2, 1, 1, 0)
    assert first["pcie_replays_total"] == 3
    assert "nvlink_tx_bps" not in first  # a counter needs two readings
    assert second["nvlink_tx_bps"] == 1000 * 1024 / 2.0  # KiB over 2 s -> bytes/s
    assert second["nvlink_rx_bps"] == 0.0  # an idle direction is 0: NVLink is there
    assert not {"nvlink_tx_kib", "nvlink_rx_kib"} & set(second)  # raw counters never travel
    assert warnings == []


def test_field_values_are_asked_for_the_sum_over_all_links():
    nvml = HandBuiltNvml([Board()])
    seen: list = []
    real = nvml.nvmlDeviceGetFieldValues
    nvml.nvmlDeviceGetFieldValues = lambda h, ids: seen.append(list(ids)) or real(h, ids)

    collect(nvml)

    throughput = next(ids for ids in seen if len(ids) == 3)
    assert throughput[1:] == [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
                              (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS)]


def test_a_pcie_card_without_nvlink_sends_no_nvlink_metrics_not_zeros():
    # An L4 or A10: NVML reports zero links and answers the throughput fields "not supported".
    board = Board(links=0, field_fail={pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: NOT_SUPPORTED,
                                       pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: NOT_SUPPORTED})
    nvml = HandBuiltNvml([board])

    samples, warnings = collect(nvml, times=3)

    for sample in samples:
        assert not {"nvlink_tx_bps", "nvlink_rx_bps", "nvlink_errors_total"} & set(sample)
        assert sample["energy_j"] > 0 and "ecc_sbe_total" in sample
    # Asked once each way (field values, then the per-link counters), then never again.
    assert nvml.calls["nvmlDeviceGetNvLinkState"] == 1
    assert warnings == []


def test_zero_links_with_successful_fields_is_still_no_nvlink():
    samples, _ = collect(HandBuiltNvml([Board(links=0)]), times=2)
    assert not {"nvlink_tx_bps", "nvlink_rx_bps", "nvlink_errors_total"} & set(samples[1])


def test_a_consumer_card_without_ecc_or_row_remapping_sends_neither():
    board = Board(fail={"nvmlDeviceGetTotalEccErrors": NOT_SUPPORTED,
                        "nvmlDeviceGetRemappedRows": NOT_SUPPORTED},
                  field_fail={f: NOT_SUPPORTED for f in (
                      pynvml.NVML_FI_DEV_REMAPPED_COR, pynvml.NVML_FI_DEV_REMAPPED_UNC,
                      pynvml.NVML_FI_DEV_REMAPPED_PENDING, pynvml.NVML_FI_DEV_REMAPPED_FAILURE)})
    nvml = HandBuiltNvml([board])

    samples, warnings = collect(nvml, times=3)

    for sample in samples:
        assert not {"ecc_sbe_total", "ecc_dbe_total", "remapped_rows_correctable",
                    "remapped_rows_pending", "remapped_rows_failed"} & set(sample)
        assert sample["pcie_replays_total"] == 3
    assert nvml.calls["nvmlDeviceGetRemappedRows"] == 1  # "not supported" is remembered
    assert warnings == []


def test_an_older_pynvml_without_the_functions_falls_back_to_field_values():
    nvml = HandBuiltNvml([Board()], missing=(
        "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetPcieReplayCounter"))

    (sample,), warnings = collect(nvml)

    assert sample["energy_j"] == pytest.approx(1_234_567.890)
    assert sample["remapped_rows_correctable"] == 2 and sample["remapped_rows_pending"] == 1
    assert sample["pcie_replays_total"] == 3
    assert warnings == []


def test_a_pynvml_without_field_values_or_the_new_functions_sends_none_of_them():
    # A release from before these queries: not even the field ids exist.
    nvml = HandBuiltNvml([Board()], missing=(
        "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetNvLinkErrorCounter", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"))

    samples, warnings = collect(nvml, times=2)

    assert not (NEW_KEYS - {"ecc_sbe_total"}) & set(samples[1])
    assert samples[1]["power_w"] == 400.0 and samples[1]["lost"] == 0
    assert warnings == []


def test_nvlink_errors_fall_back_to_the_per_link_counters_found_once():
    fields = (pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
              pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
              pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
              pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL)
    board = Board(links=4, field_fail={f: NOT_SUPPORTED for f in fields})
    nvml = HandBuiltNvml([board])

    samples, warnings = collect(nvml, times=3)

    assert [s["nvlink_errors_total"] for s in samples] == [4 * 3] * 3
    # Each of the 36 link numbers asked once (4 answer, the others are invalid arguments);
    # then 4 links x 4 counters per interval.
    assert nvml.calls["nvmlDeviceGetNvLinkState"] == pynvml.NVML_NVLINK_MAX_LINKS
    assert nvml.calls["nvmlDeviceGetNvLinkErrorCounter"] == 3 * 4 * 4
    assert warnings == []


def test_a_counter_that_went_down_gives_no_rate_for_that_interval():
    board = Board()
    values = [100, 300, 50, 150]  # the driver reloaded between the 2nd and 3rd reading

    samples, _ = collect(HandBuiltNvml([board]), times=4,
                         change=lambda i: setattr(board, "rx_kib", values[i]))

    assert [s.get("nvlink_rx_bps") for s in samples] == [None, 200 * 1024, None, 100 * 1024]


def test_another_error_on_one_field_is_a_warning_and_only_that_field_is_absent():
    board = Board(fail={"nvmlDeviceGetPcieReplayCounter": pynvml.NVML_ERROR_UNKNOWN},
                  field_fail={pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: NOT_SUPPORTED})
    nvml = HandBuiltNvml([board])

    samples, warnings = collect(nvml, times=2)

    assert all("pcie_replays_total" not in s and s["energy_j"] > 0 for s in samples)
    assert nvml.calls["nvmlDeviceGetPcieReplayCounter"] == 2  # may be transient: asked again
    assert len(warnings) == 1 and "pcie_replays" in warnings[0]
    assert all(s["lost"] == 0 for s in samples)  # one field failing is not a lost GPU


def test_a_driver_that_refuses_the_all_links_scope_has_no_nvlink_throughput_not_a_warning():
    # Before the aggregate scope existed, NVML answers the field "invalid argument".
    board = Board(field_fail={pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
                              pynvml.NVML_ERROR_INVALID_ARGUMENT})
    nvml = HandBuiltNvml([board])

    samples, warnings = collect(nvml, times=3)

    assert all("nvlink_tx_bps" not in s and "nvlink_rx_bps" not in s for s in samples)
    assert all(s["nvlink_errors_total"] == 54 for s in samples)  # another call: unaffected
    assert nvml.calls["nvmlDeviceGetFieldValues"] == 1 + 3  # throughput once, errors each time
    assert warnings == []
