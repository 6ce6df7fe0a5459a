"""Several processes, one ``/metrics``: prometheus_client's multiprocess mode as the stack
runs it. Counts of every process are summed, those of processes gone included; a live gauge
(browsers connected) forgets a process once it is gone."""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.lib import selfmetrics

# Each test runs Python processes of its own.
pytestmark = pytest.mark.slow(seconds=2)

# A server process: counts a request and a live client, says so, then waits to be told to go.
CHILD = """
import sys
import controlplane.realtime.metrics as live
import controlplane.telemetry.ingest.metrics as ingest
ingest.REQUESTS_OK.inc()
live.LIVE_CLIENTS.inc()
print("counted", flush=True)
sys.stdin.read()
"""


def values(text: bytes) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text.decode())
            for s in f.samples if s.name in ("pitwall_live_clients",
                                             "pitwall_ingest_requests_total")
            and s.labels.get("outcome", "ok") == "ok"}


def test_counts_of_every_process_are_summed_and_live_gauges_forget_the_dead(tmp_path,
                                                                           monkeypatch):
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    children = [subprocess.Popen([sys.executable, "-c", CHILD], env=env, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                for _ in range(2)]
    try:
        assert [c.stdout.readline().strip() for c in children] == ["counted", "counted"]
        monkeypatch.setenv(selfmetrics.MULTIPROC_ENV, str(tmp_path))
        assert values(selfmetrics.exposition()) == {
            "pitwall_ingest_requests_total": 2, "pitwall_live_clients": 2}
        children[0].communicate("")  # one process exits
        assert values(selfmetrics.exposition()) == {
            "pitwall_ingest_requests_total": 2, "pitwall_live_clients": 1}
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_a_new_stack_starts_from_an_empty_directory(tmp_path):
    (tmp_path / "counter_1.db").write_bytes(b"old")
    (tmp_path / "notes.txt").write_text("kept")
    selfmetrics.prepare_directory(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
