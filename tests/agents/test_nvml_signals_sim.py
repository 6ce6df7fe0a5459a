"""The new GPU signals from the simulated NVML, injected into the real NvmlCollector as the pynvml
module: boards that have them and boards that do not, NVML's answers, counters that only grow."""

from __future__ import annotations

import pynvml
import pytest

from agents.collectors.nvml import NvmlCollector
from agents.collectors.nvml_values import ALL_LINKS
from agents.protocol import METRICS
from agents.sim.gpus import SimNvml

NVLINK = {"nvlink_tx_bps", "nvlink_rx_bps", "nvlink_errors_total"}
ECC = {"ecc_sbe_total", "ecc_dbe_total"}
REMAPPED = {"remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending",
            "remapped_rows_failed"}
COUNTERS = ("energy_j", "nvlink_errors_total", "ecc_sbe_total", "pcie_replays_total",
            "remapped_rows_correctable")


def tp_engine(busy: float = 0.9) -> dict:
    """A tensor-parallel engine on GPUs 0 and 1."""
    return {"pid": 4242, "gpu_indices": [0, 1], "gpu_memory_utilization": 0.9,
            "kv_cache_usage": 0.5, "busy_fraction": busy}


class Host:
    """A simulated host and its collector on one injected clock."""

    def __init__(self, model: str = "NVIDIA H100 80GB HBM3", count: int = 4, busy: float = 0.9,
                 seed: int = 11) -> None:
        self.now = 5000.0
        self.sim = SimNvml(count=count, model=model, seed=seed, state_sources=[
            lambda: tp_engine(busy)], clock=lambda: self.now)
        self.warnings: list[str] = []
        self.collector = NvmlCollector(self.sim, warn=self.warnings.append, clock=lambda: self.now)

    def run(self, intervals: int, step: float = 1.0) -> list[list[dict]]:
        samples = []
        for _ in range(intervals):
            samples.append(self.collector.collect())
            self.now += step
        return samples


def test_an_h100_host_sends_every_new_signal_within_the_catalogs_bounds():
    host = Host()
    *_, last = host.run(3)

    for sample in last:
        assert NVLINK | ECC | REMAPPED | {"energy_j", "pcie_replays_total"} <= set(sample)
        for key in ("energy_j", *NVLINK, *REMAPPED, "ecc_sbe_total", "pcie_replays_total"):
            metric = METRICS[f"gpu.{key}"]
            assert sample[key] >= metric.low, key
            assert metric.high is None or sample[key] <= metric.high, key
            assert isinstance(sample[key], int) or not metric.integer, key
    assert host.warnings == []


def test_nvlink_carries_the_tensor_parallel_engines_traffic_only():
    host = Host()
    *_, last = host.run(3)
    by_index = {g["index"]: s for g, s in zip(host.collector.inventory(), last, strict=True)}

    for index in (0, 1):  # the engine's GPUs exchange GiB/s
        assert by_index[index]["nvlink_tx_bps"] > 1e9 and by_index[index]["nvlink_rx_bps"] > 1e9
    for index in (2, 3):  # idle, but NVLink is there: 0, not absent
        assert by_index[index]["nvlink_tx_bps"] == 0 == by_index[index]["nvlink_rx_bps"]


def test_energy_grows_by_the_power_drawn():
    host = Host()
    samples = host.run(61)

    for gpu in range(4):
        series = [s[gpu] for s in samples]
        used = series[-1]["energy_j"] - series[0]["energy_j"]
        # 60 one-second steps; the simulated draw changes each step, NVML samples it.
        drawn = sum(s["power_w"] for s in series[1:])
        assert used == pytest.approx(drawn, rel=0.05)
    busy, idle = samples[-1][0]["energy_j"] - samples[0][0]["energy_j"], \
        samples[-1][3]["energy_j"] - samples[0][3]["energy_j"]
    assert busy > 5 * idle


def test_the_counters_only_grow_and_errors_do_happen_under_load():
    host = Host(count=2)
    samples = host.run(1500, step=10.0)  # about four busy hours

    for gpu in range(2):
        for key in COUNTERS:
            values = [s[gpu][key] for s in samples]
            assert values == sorted(values), key
        assert samples[-1][gpu]["ecc_sbe_total"] > samples[0][gpu]["ecc_sbe_total"]
        assert samples[-1][gpu]["nvlink_errors_total"] > samples[0][gpu]["nvlink_errors_total"]
        assert samples[-1][gpu]["pcie_replays_total"] > samples[0][gpu]["pcie_replays_total"]
    assert all(s[0]["remapped_rows_pending"] == 0 == s[0]["remapped_rows_failed"]
               for s in samples)


@pytest.mark.parametrize(("model", "absent"), [
    ("NVIDIA L4", NVLINK),  # PCIe inference cards: no NVLink
    ("NVIDIA A10G", NVLINK),
    ("NVIDIA T4", NVLINK | REMAPPED),  # Turing retires pages instead of remapping rows
    ("NVIDIA GeForce RTX 4090", NVLINK | ECC | REMAPPED),  # no ECC on a consumer card
    ("Tesla P100-PCIE-16GB", NVLINK | REMAPPED | {"energy_j"}),  # before Volta
])
def test_a_board_without_a_feature_sends_it_absent_never_zero(model, absent):
    host = Host(model=model, count=2)
    samples = host.run(3)

    for sample in samples[-1]:
        assert not absent & set(sample)
        assert sample["pcie_replays_total"] >= 0 and sample["power_w"] > 0
        present = (NVLINK | ECC | REMAPPED | {"energy_j"}) - absent - {"nvlink_tx_bps",
                                                                         "nvlink_rx_bps"}
        assert present <= set(sample)
    assert host.warnings == []


def test_it_answers_nvlink_queries_as_nvml_does():
    sim = SimNvml(count=1, seed=1)
    sim.nvmlInit()
    h100 = sim.nvmlDeviceGetHandleByIndex(0)
    l4 = SimNvml(count=1, model="NVIDIA L4", seed=1)
    l4.nvmlInit()

    assert sim.nvmlDeviceGetNvLinkState(h100, 17) == pynvml.NVML_FEATURE_ENABLED
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetNvLinkState(h100, 18)  # an H100 has links 0-17
    with pytest.raises(pynvml.NVMLError_NotSupported):
        l4.nvmlDeviceGetNvLinkState(l4.nvmlDeviceGetHandleByIndex(0), 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        l4.nvmlDeviceGetNvLinkErrorCounter(l4.nvmlDeviceGetHandleByIndex(0), 0, 0)


def test_field_values_answer_each_field_with_its_own_return_code():
    sim = SimNvml(count=1, seed=1)
    sim.nvmlInit()
    handle = sim.nvmlDeviceGetHandleByIndex(0)
    tx = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX

    values = sim.nvmlDeviceGetFieldValues(handle, [
        (tx, ALL_LINKS), (tx, 0), (tx, 18), pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, pynvml.NVML_FI_DEV_MEMORY_TEMP])

    total, link0, link18, energy, links, memory_temp = values
    assert total.nvmlReturn == link0.nvmlReturn == pynvml.NVML_SUCCESS
    assert link0.value.ullVal * 18 == pytest.approx(total.value.ullVal, rel=1e-6)
    assert link18.nvmlReturn == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert energy.value.ullVal == sim.nvmlDeviceGetTotalEnergyConsumption(handle)
    assert (links.valueType, links.value.uiVal) == (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 18)
    assert memory_temp.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED  # not simulated


def test_the_same_seed_gives_the_same_counters():
    one, two = Host(seed=5).run(20), Host(seed=5).run(20)
    assert one == two
