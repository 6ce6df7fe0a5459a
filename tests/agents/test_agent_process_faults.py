"""The real agent process (``python -m agents run``) under faults of its own host: killed with
SIGKILL again and again while it spools hard, and a clock ahead of the server's. No crash loop,
nothing lost but what docs/agent.md says, and the stop line accounts for every batch."""

from __future__ import annotations

import gzip
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.agents.fake_ingest import FakeIngest, free_port
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
# Agents as processes of their own, killed and restarted (one case runs half a minute).
pytestmark = pytest.mark.slow(seconds=35)
TOKEN = "pw_agent_do-not-print-me"
STOP_LINE = re.compile(r"stopped: boot (\S+) made (\d+) batches .*?; (\d+) delivered, (\d+) "
                       r"dropped, (\d+) evicted and not yet reported; (\d+) batches wait")


def agent(server: str, spool: Path, interval: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITWALL_")}
    return subprocess.Popen(
        [sys.executable, "-m", "agents", "run", "--server", server, "--token", TOKEN,
         "--gpu-backend", "sim", "--sim-gpus", "1", "--interval", interval,
         "--hostname", "sim-node-9", "--spool-dir", str(spool), "--log-level", "info"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def spooled(spool: Path) -> int:
    return sum(1 for p in spool.iterdir() if p.name.endswith(".json.gz")) if spool.exists() else 0


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return err


def test_sigkill_while_spooling_never_crash_loops_and_loses_no_spooled_batch(tmp_path):
    spool = tmp_path / "spool"
    down = f"http://127.0.0.1:{free_port()}"
    rng = random.Random(7)
    kills = 8
    for _ in range(kills):
        proc = agent(down, spool, "0.02")  # 50 batches a second, each fsynced to the spool
        before = spooled(spool)
        wait_until(lambda p=proc, n=before: p.poll() is not None or spooled(spool) > n + 5,
                   60, lambda: "the agent spooled nothing", every=0.05)
        time.sleep(rng.uniform(0.0, 0.3))
        assert proc.poll() is None, f"the agent exited on its own:\n{proc.stderr.read()}"
        proc.kill()  # SIGKILL: mid-write as often as not at this rate
        proc.wait()
        proc.stderr.close()
    # What a power loss or a bad disk could leave besides: a half-written temporary file and
    # a truncated batch file. Neither may stop the next start.
    (spool / ".tmp-9999999999999998-1.json.gz").write_bytes(b"\x1f\x8b half")
    good = sorted(p for p in spool.iterdir() if p.name.endswith(".json.gz"))
    truncated = spool / f"{int(good[-1].name.split('-')[0]) + 1000:016d}-1.json.gz"
    truncated.write_bytes(gzip.compress(b'{"protocol":1}')[:12])

    with FakeIngest() as server:
        proc = agent(server.url, spool, "0.2")
        wait_until(lambda: proc.poll() is not None or spooled(spool) == 0, 120,
                   lambda: f"{spooled(spool)} batches still spooled", every=0.2)
        err = stop(proc)

    boots: dict[str, list[int]] = defaultdict(list)
    for request in server.requests:
        for b in request.batches:
            boots[b["agent"]["boot_id"]].append(b["agent"]["seq"])
    assert len(boots) == kills + 1
    for seqs in boots.values():
        # Each killed run's spooled batches arrive whole and in order: the only loss a
        # SIGKILL causes is its last batch, if it was being written (never a gap).
        assert seqs == list(range(1, len(seqs) + 1))
    assert "Traceback" not in err
    assert f"corrupt file {truncated}" in err
    assert not [p for p in spool.iterdir() if p.name.startswith(".tmp-")]


def test_a_clock_ahead_of_the_servers_delays_batches_and_loses_none(tmp_path):
    spool = tmp_path / "spool"
    with FakeIngest() as server:
        # The server refuses samples more than 300 s ahead of its clock, which is 305 s behind
        # this host's: each batch is accepted about 5 s after it was made.
        server.clock_offset, server.max_skew = -305, 300
        proc = agent(server.url, spool, "0.2")
        try:
            wait_until(lambda: proc.poll() is not None or sum(
                len(r.batches) for r in server.requests if r.status == 200) >= 40, 120,
                lambda: "nothing accepted", every=0.2)
        finally:
            err = stop(proc)

    accepted = [b["agent"]["seq"] for r in server.requests if r.status == 200 for b in r.batches]
    boot, made, delivered, dropped, evicted, waiting = STOP_LINE.search(err).groups()
    assert accepted == list(range(1, len(accepted) + 1))  # in order, none skipped
    assert (int(dropped), int(evicted)) == (0, 0)
    assert int(delivered) == len(accepted)
    assert int(made) == int(delivered) + int(waiting)  # the rest waits for the server's clock
    assert int(waiting) > 5
    [line] = [line for line in err.splitlines() if "clock:" in line]
    assert re.search(r"about (304|305|306) s ahead of the server's", line)
