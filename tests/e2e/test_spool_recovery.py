"""The reliability promise: while the control plane is down the agent spools every batch to
disk; after an agent restart and the server's return, every sample is stored exactly once,
in order."""

from __future__ import annotations

import pytest
from django.db import connection

from controlplane.fleet.tokens import issue_agent_token
from tests.support.live import Process, free_port, sim_agent, start_server
from tests.support.polling import wait_until

# Real processes or minutes of work: `make test` runs them, `make test-fast` leaves them
# out; seconds: about what each test takes (slow tests start first, the longest first).
pytestmark = pytest.mark.slow(seconds=10)


def agent(port: int, token_file, spool, log) -> Process:
    return sim_agent(port, token_file, "spool-host", spool, gpus=2, interval=0.2, log=log)


def spooled(spool) -> list:
    return sorted(p for p in spool.glob("*.json.gz"))


def query(sql: str) -> list:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchall()


def test_an_outage_and_an_agent_restart_lose_nothing_and_store_nothing_twice(
        empty_samples, tmp_path):
    port = free_port()  # nothing listens here yet: the control plane is down
    token_file = tmp_path / "token"
    token_file.write_text(issue_agent_token("spool-host")[0])
    spool = tmp_path / "spool"

    first = agent(port, token_file, spool, tmp_path / "agent1.log")
    wait_until(lambda: len(spooled(spool)) >= 10, 60, first.output)
    assert first.stop() == 0  # SIGTERM: what is still in memory goes to the spool too
    before_restart = len(spooled(spool))

    second = agent(port, token_file, spool, tmp_path / "agent2.log")  # a new boot_id
    wait_until(lambda: len(spooled(spool)) >= before_restart + 10, 60, second.output)
    server = start_server(port, tmp_path / "server.log")
    try:
        wait_until(lambda: not spooled(spool), 120, second.output)
        # A few live batches after the replay, then stop.
        stored = lambda: query("SELECT count(*) FROM telemetry_host_sample")[0][0]  # noqa: E731
        drained = stored()
        wait_until(lambda: stored() >= drained + 5, 60, second.output)
        assert second.stop() == 0
    finally:
        server.stop()

    streams = query("SELECT boot_id, max_seq FROM telemetry_agentstream ORDER BY first_seen")
    assert len(streams) == 2  # one per agent start
    # Each batch of this agent holds one sample, seqs run 1..max_seq per boot without gaps:
    # so the number of stored host rows must equal the sum of the streams' last seqs.
    host_rows = query("SELECT count(*), count(DISTINCT ts) FROM telemetry_host_sample s"
                      " JOIN fleet_host h ON h.id = s.host_id WHERE h.hostname = 'spool-host'")[0]
    assert host_rows[0] == host_rows[1] == sum(seq for _, seq in streams), (
        f"rows {host_rows}, streams {streams}\n--- agent 1\n{first.output()[-2000:]}"
        f"\n--- agent 2\n{second.output()[-3000:]}")
    gpu_rows = query("SELECT count(*) FROM telemetry_gpu_sample")[0][0]
    assert gpu_rows == 2 * host_rows[0]
    # In order: rows were appended in sample order (the heap keeps insertion order here).
    stamps = [ts for (ts,) in query("SELECT ts FROM telemetry_host_sample ORDER BY ctid")]
    assert stamps == sorted(stamps)
    assert "Traceback" not in first.output() + second.output()
