"""Case 1: the control plane's web/ingest process killed with SIGKILL and kept down for a minute
while the fleet streams. The agents spool every batch to disk; when the server is
back they replay in order: every sample stored once, none lost, and the catch-up time measured.
(Three minutes down proved the same, with three times the batches to replay: the replay's throughput
is make bench-replay's.)"""

from __future__ import annotations

import os

import pytest

from tests.faults.harness import FLEET_SIZE, query, record_account, web_down

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]
DOWN_S = float(os.environ.get("PITWALL_FAULT_DOWN_S", 60))


def test_a_control_plane_killed_for_minutes_loses_and_repeats_nothing(stack, fleet):
    stack.start()
    fleet.start()
    fleet.wait_stored(10)

    # Every agent spools while the server is away (a batch a second each).
    outage = web_down(stack, fleet, DOWN_S, lambda: fleet.spooled() >= FLEET_SIZE * 10,
                      lambda: f"spooled {fleet.spooled()}:\n{fleet.agents[0].output()}",
                      within=120)

    account = fleet.account()
    record_account(
        "1. control plane killed", account, injected="web/ingest process SIGKILL",
        duration_s=outage.down_s, recovery_s=outage.catch_up_s,
        notes=f"{len(fleet.agents)} agents at 1 Hz; {outage.peak} batches spooled at the peak; "
              f"recovery: from the restart until every spool was empty")
    assert outage.not_running == [] and not fleet.crashed()
    assert account.lost == 0, account.hosts_short()
    assert account.duplicated == 0
    assert account.killed_runs == 0 and account.stored > FLEET_SIZE * DOWN_S


def test_the_account_sees_samples_that_were_never_stored(stack, fleet):
    """The check every case relies on can fail: samples missing from the database are lost."""
    stack.start_web()
    fleet.start()
    fleet.wait_stored(5)
    fleet.wait_drained(60)
    fleet.stop()
    victim = fleet.agents[0].hostname
    query("DELETE FROM telemetry_host_sample WHERE ctid IN (SELECT s.ctid FROM"
          " telemetry_host_sample s JOIN fleet_host h ON h.id = s.host_id"
          " WHERE h.hostname = %s ORDER BY s.ts LIMIT 3)", (victim,))
    account = fleet.account()
    assert account.lost == 3 and account.duplicated == 0
    assert account.hosts_short() == [f"{victim}: expected {account.per_host[victim][0]}, "
                                     f"stored {account.per_host[victim][0] - 3}"]
