"""Samples outside the retained time range are refused and make no partitions."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from controlplane.fleet.models import Host
from controlplane.telemetry import partitions
from tests.telemetry.factories import NOTHING, batch, raw_partitions, refused, sample, stored_rows

DAY = 86400.0



def test_a_sample_older_than_the_raw_retention_is_refused_naming_it(ingest, host_token,
                                                                  settings):
    now = time.time()
    old = now - (settings.PITWALL["RAW_RETENTION_DAYS"] + 1) * DAY
    before = raw_partitions()
    body = batch(samples=[sample(now - 2), sample(now - 1), sample(now), sample(old)])
    reply = refused(ingest, body, host_token, 400, "samples[3].ts")
    assert "retention" in reply["error"]
    assert stored_rows() == NOTHING
    assert raw_partitions() == before


def test_an_old_sample_in_a_replay_names_its_batch(ingest, host_token, settings):
    boot = batch()["agent"]["boot_id"]
    old = time.time() - (settings.PITWALL["RAW_RETENTION_DAYS"] + 3) * DAY
    good, bad = batch(1, boot), batch(2, boot, samples=[sample(time.time()), sample(old)])
    refused(ingest, {"protocol": 1, "batches": [good, bad]}, host_token, 400,
            "batches[1].samples[1].ts")
    assert stored_rows() == NOTHING


def test_samples_of_many_days_of_1970_create_no_tables(ingest, host_token):
    before = raw_partitions()
    samples = [sample(86400.0 * day + 1) for day in range(1, 40)]
    refused(ingest, batch(samples=samples), host_token, 400, "samples[0].ts")
    assert raw_partitions() == before
    assert stored_rows() == NOTHING


def test_a_sample_just_inside_the_retention_is_stored(ingest, host_token, settings):
    ts = time.time() - settings.PITWALL["RAW_RETENTION_DAYS"] * DAY + 600
    code, reply = ingest.post(batch(samples=[sample(ts)]), host_token)
    assert (code, reply["accepted"]) == (200, 1), reply


def test_the_partition_guard_refuses_days_outside_the_retained_range(settings):
    now = time.time()
    today = partitions.day_of(now)
    retention = settings.PITWALL["RAW_RETENTION_DAYS"]
    ahead = settings.PITWALL["PARTITIONS_AHEAD_DAYS"]
    first, last = partitions.raw_days(now)
    assert (first, last) == (today - timedelta(days=retention), today + timedelta(days=ahead))
    assert partitions.create_on_demand_sql({first, last}, now)  # the edges are fine
    for day in (first - timedelta(days=1), last + timedelta(days=1),
                partitions.day_of(86400.0 * 3)):
        with pytest.raises(partitions.OutsideRetention, match=day.isoformat()):
            partitions.create_on_demand_sql({today, day}, now)


def test_the_writer_never_creates_a_partition_outside_the_retained_range(ingest, host_token):
    """Even a batch that went around the request checks: the writer refuses it, alone."""
    from controlplane.telemetry.ingest.writer import OutsideWindow, Work

    assert ingest.post(batch(seq=1), host_token)[0] == 200
    host_id = Host.objects.get(hostname="gpu-node-1").id
    before = raw_partitions()
    old_day = partitions.day_of(86400.0 * 12)
    stray = Work(host_id=host_id, boot_id=batch()["agent"]["boot_id"], seq=1,
                 agent_version="t", tables={}, days={old_day})

    async def submit():
        return await ingest.app.writer.submit([stray])

    with pytest.raises(OutsideWindow):
        ingest.run(submit())
    assert raw_partitions() == before
    assert ingest.post(batch(seq=2), host_token)[0] == 200  # the writer carries on
