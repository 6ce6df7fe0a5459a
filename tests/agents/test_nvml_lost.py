"""A GPU that falls off the bus, agent side: NVML says it is lost (GpuIsLost), answers Unknown to
everything, or stops listing it. The agent still sends ``lost: 1`` for it, and an inventory
without a GPU that vanished. NVML is the simulated one (injected as the pynvml module) or the
hand-built one of tests/agents/nvml_handbuilt.py."""

from __future__ import annotations

import pynvml
import pytest

from agents.batch import BatchBuilder
from agents.collectors.nvml import UNKNOWN_STREAK, NvmlCollector
from agents.loop import Sampler, Sources
from agents.sim.gpus import SimNvml
from agents.sim.scenario import simulate
from agents.sim.scenario_presets import preset
from tests.agents.nvml_handbuilt import Board, HandBuiltNvml


class Host:
    def __init__(self, count: int = 4) -> None:
        self.now = 100.0
        self.sim = SimNvml(count=count, seed=3, clock=lambda: self.now)
        self.warnings: list[str] = []
        self.collector = NvmlCollector(self.sim, warn=self.warnings.append, clock=lambda: self.now)
        self.uuids = [g["uuid"] for g in self.collector.inventory()]

    def collect(self) -> dict[str, dict]:
        self.now += 1.0
        return {s["uuid"]: s for s in self.collector.collect()}


def test_a_gpu_nvml_reports_lost_is_sent_as_lost_with_the_xid_that_explains_it():
    host = Host()
    host.collect()
    host.sim.fall_off_bus(2, "lost")

    first, second = host.collect(), host.collect()

    lost = host.uuids[2]
    assert first[lost] == {"uuid": lost, "lost": 1, "xid_last": 79}
    assert second[lost] == {"uuid": lost, "lost": 1}
    assert all(first[u]["lost"] == 0 and "util_pct" in first[u] for u in host.uuids if u != lost)
    # NVML still lists it: it stays in the inventory (the server keeps it present, lost).
    assert [g["uuid"] for g in host.collector.inventory()] == host.uuids
    assert len([w for w in host.warnings if lost in w]) == 1


def test_a_gpu_that_answers_unknown_to_every_read_is_lost_after_a_streak():
    host = Host()
    host.collect()
    host.sim.fall_off_bus(1, "unknown")
    gone = host.uuids[1]

    samples = [host.collect()[gone] for _ in range(UNKNOWN_STREAK + 1)]

    # Not yet known whether it is lost: the flag is absent, not 0, until the streak decides.
    assert samples[:UNKNOWN_STREAK - 1] == [{"uuid": gone}] * (UNKNOWN_STREAK - 1)
    assert samples[UNKNOWN_STREAK - 1:] == [{"uuid": gone, "lost": 1}] * 2


def test_a_gpu_that_recovers_from_unknown_errors_is_not_lost():
    board = Board()
    every = ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetTotalEccErrors",
             "nvmlDeviceGetRemappedRows", "nvmlDeviceGetPcieReplayCounter",
             "nvmlDeviceGetFieldValues", "nvmlDeviceGetPowerUsage")
    collector = NvmlCollector(HandBuiltNvml([board]), warn=lambda message: None)
    collector.collect()

    board.fail = dict.fromkeys(every, pynvml.NVML_ERROR_UNKNOWN)
    failing = [collector.collect()[0] for _ in range(UNKNOWN_STREAK - 1)]
    board.fail = {}
    recovered = collector.collect()[0]

    assert all("lost" not in s for s in failing)
    assert recovered["lost"] == 0 and recovered["power_w"] == 400.0


def test_a_gpu_that_vanishes_from_nvmls_list_leaves_the_inventory_and_is_sent_lost():
    host = Host()
    host.collect()
    host.sim.fall_off_bus(1, "vanished")

    samples = host.collect()

    gone = host.uuids[1]
    assert samples[gone] == {"uuid": gone, "lost": 1}
    inventory = {g["uuid"]: g["index"] for g in host.collector.inventory()}
    # The others are renumbered as NVML now numbers them.
    assert inventory == {host.uuids[0]: 0, host.uuids[2]: 1, host.uuids[3]: 2}
    assert all(samples[u]["lost"] == 0 for u in inventory)
    assert all(gone not in per_gpu for per_gpu in host.collector.process_gpu_memory().values())
    assert any("no longer lists" in w for w in host.warnings)


def test_the_agent_sends_the_inventory_without_the_vanished_gpu_in_the_next_batch():
    sim = SimNvml(count=3, seed=3)
    sampler = Sampler(Sources(gpus=NvmlCollector(sim, warn=lambda m: None), simulated=True),
                      warn=lambda m: None)
    builder = BatchBuilder(boot_id="00000000-0000-4000-8000-000000000001")
    first = builder.build([sampler.sample()], sampler.inventory())
    unchanged = builder.build([sampler.sample()], sampler.inventory())

    sim.fall_off_bus(0, "vanished")
    after = builder.build([sampler.sample()], sampler.inventory())

    gone = first["host"]["gpus"][0]["uuid"]
    assert "host" not in unchanged
    assert [g["uuid"] for g in after["host"]["gpus"]] == [
        g["uuid"] for g in first["host"]["gpus"][1:]]
    assert {"uuid": gone, "lost": 1} in after["samples"][0]["gpus"]


@pytest.mark.parametrize("form", ["lost", "unknown", "vanished"])
def test_each_form_is_taken_and_another_is_refused(form):
    sim = SimNvml(count=2)
    sim.fall_off_bus(1, form)
    assert sim.fallen == {1: form}
    with pytest.raises(ValueError, match="form must be one of"):
        sim.fall_off_bus(0, "melted")


def test_the_gpu_off_bus_scenario_shows_both_forms_a_minute_in():
    batches = simulate(preset("gpu_off_bus"), 2, 1_800_000_000.0)
    inventory = batches[0]["host"]["gpus"]
    lost, vanished = inventory[3]["uuid"], inventory[5]["uuid"]

    def flags(uuid: str) -> list[int | None]:
        return [next((g.get("lost") for g in b["samples"][0]["gpus"] if g["uuid"] == uuid), None)
                for b in batches]

    assert flags(lost) == [0] * 60 + [1] * 60
    assert flags(vanished) == [0] * 60 + [1] * 60
    last_inventory = next(b["host"] for b in reversed(batches) if "host" in b)
    assert lost in {g["uuid"] for g in last_inventory["gpus"]}
    assert vanished not in {g["uuid"] for g in last_inventory["gpus"]}
