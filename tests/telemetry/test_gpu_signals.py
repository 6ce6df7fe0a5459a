"""The new GPU signals from the agent to the series API: a simulated host (simulated NVML, the
agent's own collector, Sampler and BatchBuilder) whose GPUs 3 and 5 fall off the bus a minute
in, its batches through the real ingest (protocol v1 and v2) into PostgreSQL, read back by
``GET /api/v1/series/``; the vanished GPU marked absent in the fleet tables."""

from __future__ import annotations

import time

import pytest

from agents.protocol import to_columns
from agents.sim.scenario import simulate
from agents.sim.scenario_presets import preset
from controlplane.fleet.models import Gpu
from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from tests.api.helpers import series
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role

SIGNALS = ("energy_j", "nvlink_tx_bps", "nvlink_rx_bps", "nvlink_errors_total", "ecc_sbe_total",
           "remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending",
           "remapped_rows_failed", "pcie_replays_total", "lost")
INTERVAL_S = 5.0


@pytest.fixture
def reader(transactional_db):
    user_with_role("viewer", "viewer")
    return bearer_client(issue_api_token("viewer", name="tests", scope="read"))


@pytest.fixture
def streamed(ingest):
    """The gpu_off_bus scenario's 3 minutes, every other batch sent as protocol v2."""
    scenario = preset("gpu_off_bus")
    token, _ = issue_agent_token(scenario.host.hostname)
    end = float(int(time.time())) - 1
    batches = simulate(scenario, 3, end, INTERVAL_S)
    for i, batch in enumerate(batches):
        code, reply = ingest.post(to_columns(batch) if i % 2 else batch, token)
        assert code == 200 and not reply["ignored"], reply
    return batches, end


def sent(batches: list[dict], uuid: str, key: str) -> list[list[float]]:
    """[ts, value] of each sample that carried ``key`` for the GPU, as the series API lists."""
    return [[s["ts"], g[key]] for b in batches for s in b["samples"] for g in s["gpus"]
            if g["uuid"] == uuid and key in g]


def points(reader, uuid: str, key: str, end: float) -> list[list[float]]:
    response = series(reader, metric=f"gpu.{key}", entity=uuid, start=end - 600, end=end + 1)
    assert response.status_code == 200, response.content
    (line,) = response.json()["series"]
    return line["points"]


def test_each_new_signal_is_stored_and_read_back_as_the_agent_sent_it(streamed, reader):
    batches, end = streamed
    uuid = batches[0]["host"]["gpus"][0]["uuid"]  # one of the engine's GPUs: healthy throughout

    for key in SIGNALS:
        expected = sent(batches, uuid, key)
        assert expected, key  # an H100 (simulated) has every one of them
        got = points(reader, uuid, key, end)
        assert [p[0] for p in got] == pytest.approx([p[0] for p in expected]), key
        assert [p[1] for p in got] == [p[1] for p in expected], key  # J and bytes/s: float8
    assert max(v for _, v in sent(batches, uuid, "nvlink_tx_bps")) > 1e9  # its TP peer's traffic


def test_a_counter_reads_back_growing_and_energy_at_the_power_drawn(streamed, reader):
    batches, end = streamed
    uuid = batches[0]["host"]["gpus"][0]["uuid"]
    energy = [v for _, v in points(reader, uuid, "energy_j", end)]
    power = [v for _, v in points(reader, uuid, "power_w", end)]

    assert energy == sorted(energy)
    assert energy[-1] - energy[0] == pytest.approx(sum(power[1:]) * INTERVAL_S, rel=0.05)


def test_the_lost_gpus_read_lost_after_they_fell_and_the_vanished_one_is_absent(streamed, reader):
    batches, end = streamed
    gpus = batches[0]["host"]["gpus"]
    lost, vanished = gpus[3]["uuid"], gpus[5]["uuid"]
    fell_at = batches[0]["samples"][0]["ts"] + 60

    for uuid in (lost, vanished):
        flags = points(reader, uuid, "lost", end)
        assert flags and all(v == (1 if ts >= fell_at else 0) for ts, v in flags), flags
        assert [v for _, v in flags].count(1) >= 20
    assert Gpu.objects.get(uuid=lost).present is True  # NVML still lists it: lost, present
    gone = Gpu.objects.get(uuid=vanished)
    assert gone.present is False and gone.removed_at is not None
    assert gone.simulated is True
