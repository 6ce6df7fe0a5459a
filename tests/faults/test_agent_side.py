"""Case 8: faults on the agents' side (docs/agent.md, "Spool" and "Clock").

- the spool's disk full: the control plane down while every agent's spool sits on a tmpfs of
  its own that fills; the agents keep the newest batches, count the ones they evict, report
  them when the server is back (fleet_host.spool_evicted_*); everything else is stored.
- clock skew: agents whose clock is 30 s past the server's allowed skew ahead of the server's
  (faketime) and agents as far behind. Ahead: refused as "clock" until the server's clock
  reaches them, kept in the spool meanwhile (delayed by the skew less the allowance, not lost);
  then restarted with the right clock, their spools are delivered as the server's clock
  reaches the held batches. Behind: stored at once, at their times. The server allows 60 s
  here (PITWALL_MAX_CLOCK_SKEW_S, 300 s by default): the same proof as 10 minutes off against
  300 s, which took 11 of the suite's 33 minutes on 2 cores.
- SIGKILL while spooling: the control plane down, every agent spooling fast and SIGKILLed
  again and again, restarted each time; then the server returns and every spooled batch is
  delivered. A SIGKILL loses at most the batch being written (atomic writes).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.transport import CLOCK_SKEW_WARN_S
from tests.faults.harness import (
    Agent,
    Fleet,
    Stack,
    query,
    record_account,
    stored_per_host,
    web_down,
)
from tests.support.polling import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]
# The spool-disk case's outage: the disks fill after about 24 s (SPOOL_DISK at 1 Hz), and from
# then on every batch evicts: the 16 s left are as many evictions an agent to account.
DOWN_S = float(os.environ.get("PITWALL_FAULT_AGENT_DOWN_S", 40))
SPOOL_DISK = os.environ.get("PITWALL_FAULT_SPOOL_DISK", "96k")  # each agent's tmpfs
# The server's allowed skew (PITWALL_MAX_CLOCK_SKEW_S) in the clock case, and the agents'.
# The agents' must pass both the allowance (else nothing is refused) and the skew the agent
# warns of (CLOCK_SKEW_WARN_S, 60 s: each agent must say it once), with room for the Date
# header's whole seconds. Past that its size proves nothing more, and every second of it is
# waited twice: before the first ahead sample is stored, and for the held ones at the end.
ALLOWED_SKEW_S = int(os.environ.get("PITWALL_FAULT_ALLOWED_SKEW_S", 60))
SKEW_S = int(os.environ.get("PITWALL_FAULT_CLOCK_SKEW_S",
                            max(ALLOWED_SKEW_S, CLOCK_SKEW_WARN_S) + 30))
# Long enough for the ahead agents' batches to reach the server's window.
SKEW_RUN_S = float(os.environ.get("PITWALL_FAULT_CLOCK_RUN_S",
                                  SKEW_S - ALLOWED_SKEW_S + 60))
KILL_ROUNDS = int(os.environ.get("PITWALL_FAULT_KILL_ROUNDS", 10))


def with_clock(agent: Agent, offset_s: int) -> None:
    """Run ``agent`` with its wall clock ``offset_s`` off: libfaketime preloaded by ``env``,
    which execs the agent (the ``faketime`` wrapper forks, and a SIGTERM would end the wrapper
    before the agent's stop line). The monotonic clock stays real: faking it too makes
    Python's timed waits hang."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"))
    if not found:
        pytest.skip("libfaketime is missing: apt-get install -y faketime")
    agent.prefix = ("env", f"LD_PRELOAD={found[0]}", f"FAKETIME={offset_s:+d}s",
                    "FAKETIME_DONT_FAKE_MONOTONIC=1")


def hosts_evicted(hostnames: list[str]) -> dict[str, tuple[int, int]]:
    rows = query("SELECT hostname, spool_evicted_batches, spool_evicted_samples FROM fleet_host"
                 " WHERE hostname = ANY(%s)", (hostnames,))
    return {name: (batches, samples) for name, batches, samples in rows}


def without_stop_line(fleet: Fleet) -> list[str]:
    """After ``fleet.stop()``: agents whose last run (stopped with SIGTERM) left no stop line
    to account by, with their exit status and last words."""
    return [f"{a.hostname} (exit {a.service.proc.returncode}):\n{a.output()[-600:]}"
            for a in fleet.agents if a.service is not None and not a.runs[-1].boot]


@pytest.fixture
def small_disks(fleet: Fleet, tmp_path: Path) -> Iterator[list[Path]]:
    """A tmpfs of SPOOL_DISK per agent, its spool directory on it."""
    mounts: list[Path] = []
    try:
        for agent in fleet.agents:
            mount = tmp_path / f"{agent.hostname}.disk"
            mount.mkdir()
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SPOOL_DISK}", "tmpfs",
                                   str(mount)], capture_output=True, text=True)
            if done.returncode:
                pytest.skip(f"cannot mount a tmpfs (root and CAP_SYS_ADMIN needed): "
                            f"{done.stderr.strip()}")
            mounts.append(mount)
            agent.spool_dir = mount / "spool"
        yield mounts
    finally:
        fleet.stop()  # nothing may hold the mounts while they go
        for mount in mounts:
            subprocess.run(["umount", "-l", str(mount)], check=False)

# LAST_BATCH: an agent stopped right after its spool drained may hold the batch it made in
# that last second in memory; SIGTERM spools it for the next start (its stop line counts it
# as waiting, not lost). So "everything was delivered" allows one waiting batch per agent.

def test_a_full_spool_disk_loses_only_what_the_agents_counted(stack: Stack, fleet: Fleet,
                                                            small_disks: list[Path]):
    stack.start_web()
    fleet.start()
    fleet.wait_stored(5)

    outage = web_down(stack, fleet, DOWN_S,
                      lambda: all("is full" in a.output() for a in fleet.agents),
                      lambda: f"not full yet:\n{fleet.agents[0].output()}",
                      within=DOWN_S + 300)

    account = fleet.account()
    names = [a.hostname for a in fleet.agents]
    shown = hosts_evicted(names)
    lost_per_host = {h: e - s for h, (e, s) in account.per_host.items()}
    record_account(
        "8a. agent spool disk full", account,
        injected=f"web down, each agent's spool on a {SPOOL_DISK} tmpfs that fills",
        duration_s=outage.down_s, recovery_s=outage.catch_up_s,
        notes=f"{len(names)} agents at 1 Hz; disks full after {outage.spooling_s:.0f} s, "
              f"{outage.peak} batches spooled at the peak; lost {account.lost} = evicted and "
              f"counted {account.evicted} (the oldest batches; hosts show "
              f"{sum(s for _, s in shown.values())} evicted samples)",
        counted=account.evicted)
    assert outage.not_running == [] and not fleet.crashed()
    assert without_stop_line(fleet) == []
    assert account.evicted > 0  # the disks really filled
    assert account.lost == account.evicted, account.hosts_short()
    # Every eviction reached the server, host by host: nothing waits to be reported.
    assert {h: s for h, (_, s) in shown.items()} == lost_per_host
    assert all(b == s for b, s in shown.values())  # one sample a batch
    assert account.duplicated == 0 and account.waiting <= len(fleet.agents)  # see LAST_BATCH


def test_clocks_off_past_the_allowed_skew_delay_or_misplace_samples_but_lose_none(
        stack: Stack, fleet: Fleet):
    assert max(ALLOWED_SKEW_S, CLOCK_SKEW_WARN_S) < SKEW_S, "no refusal or no warning to see"
    ahead, behind = fleet.agents[::2], fleet.agents[1::2]
    for agent in ahead:
        with_clock(agent, SKEW_S)
    for agent in behind:
        with_clock(agent, -SKEW_S)
    stack.configure(PITWALL_MAX_CLOCK_SKEW_S=str(ALLOWED_SKEW_S))
    stack.start_web()
    started = time.monotonic()
    fleet.start()
    ahead_names = [a.hostname for a in ahead]
    # Behind: accepted at once. Ahead: held until the server's clock is within its allowed
    # skew (ALLOWED_SKEW_S) of their samples.
    fleet_behind = [a.hostname for a in behind]
    wait_until(lambda: len(stored_per_host(fleet_behind)) == len(behind), 120,
               lambda: f"behind not stored: {behind[0].output()}")
    wait_until(lambda: len(stored_per_host(ahead_names)) == len(ahead), SKEW_RUN_S + 300,
               lambda: f"ahead never stored: {ahead[0].output()}")
    delay_s = time.monotonic() - started
    time.sleep(max(0.0, SKEW_RUN_S - (time.monotonic() - started)))
    not_running = fleet.not_running()
    fleet.stop()
    run_s = time.monotonic() - started

    newest = dict(query("SELECT h.hostname, extract(epoch FROM now() - max(s.ts))::float"
                        " FROM telemetry_host_sample s JOIN fleet_host h ON h.id = s.host_id"
                        " WHERE h.hostname = ANY(%s) GROUP BY h.hostname",
                        ([a.hostname for a in fleet.agents],)))
    last_seen = dict(query("SELECT hostname, extract(epoch FROM now() - last_seen)::float"
                           " FROM fleet_host WHERE hostname = ANY(%s)",
                           ([a.hostname for a in fleet.agents],)))
    ahead_waiting = sum(a.runs[-1].waiting for a in ahead)
    said = [a.hostname for a in fleet.agents
            if a.output().count("pitwall-agent: warning: clock:") == 1]
    not_accounted = without_stop_line(fleet)

    # The clocks set right: the held batches are accepted as the server's clock reaches them.
    fixed_at = time.monotonic()
    for agent in ahead:
        agent.prefix = ()
        agent.start()
    wait_until(lambda: sum(a.spooled() for a in ahead) == 0, SKEW_S + 300,
               lambda: f"{sum(a.spooled() for a in ahead)} still held:\n{ahead[0].output()}",
               every=1)
    drained_s = time.monotonic() - fixed_at
    not_running += [f"{a.hostname}:\n{a.output()[-600:]}" for a in ahead if not a.running()]
    fleet.stop()
    account = fleet.account()
    record_account(
        "8b. agent clocks off", account,
        injected=f"faketime: {len(ahead)} agents {SKEW_S} s ahead, {len(behind)} "
                 f"{SKEW_S} s behind the server, for {run_s:.0f} s; then the clocks fixed",
        duration_s=run_s, recovery_s=drained_s,
        notes=f"ahead: first sample stored after {delay_s:.0f} s (the server refuses a ts more "
              f"than {ALLOWED_SKEW_S} s ahead: PITWALL_MAX_CLOCK_SKEW_S), {ahead_waiting} "
              f"batches held in their spools when they were stopped, none dropped; restarted "
              f"with the right clock, their spools were delivered {drained_s:.0f} s later "
              f"(recovery); behind: stored at once at their own times (newest sample "
              f"{min(newest[h] for h in fleet_behind):.0f} s old, last_seen "
              f"{max(last_seen[h] for h in fleet_behind):.0f} s)",
        held=ahead_waiting)
    assert not_running == [] and not fleet.crashed() and not_accounted == []
    assert without_stop_line(fleet) == []
    assert account.lost == 0, account.hosts_short()
    assert account.dropped == 0 and account.evicted == 0 and account.duplicated == 0
    # Held back, then delivered (see LAST_BATCH).
    assert ahead_waiting > 0 and account.waiting <= len(fleet.agents)
    assert all(newest[h] > SKEW_S - 60 for h in fleet_behind)  # stored at their times
    assert all(last_seen[h] < 60 for h in fleet_behind)  # online by the server's clock
    assert sorted(said) == sorted(a.hostname for a in fleet.agents)  # each told once


def test_agents_sigkilled_while_spooling_deliver_every_spooled_batch(stack: Stack,
                                                                     fleet: Fleet):
    for agent in fleet.agents:
        agent.interval = 0.2  # five batches a second each: a kill often lands mid-write
    stack.start_web()
    fleet.start()
    fleet.wait_stored(5)
    stack.kill("web", signal.SIGKILL)
    down_at = time.monotonic()
    rng = random.Random(8)
    not_running: list[str] = []
    at_start = {a.hostname: a.spooled() for a in fleet.agents}
    half_written = 0
    for _ in range(KILL_ROUNDS):
        for agent in fleet.agents:
            # This run has spooled a few batches of its own: it started and works.
            wait_until(lambda a=agent: a.spooled() > at_start[a.hostname] + 3 or not a.running(),
                       120, lambda a=agent: f"not spooling:\n{a.output()}", every=0.1)
            # At a random point of its write cycle (a batch each interval): later would only
            # let it spool more batches of the same kind.
            time.sleep(rng.uniform(0.0, agent.interval))
            if not agent.running():
                not_running.append(f"{agent.hostname}:\n{agent.output()[-600:]}")
            agent.kill()
            # A kill mid-write leaves the temporary file; the next start discards it.
            half_written += sum(1 for p in agent.spool_dir.iterdir()
                                if p.name.startswith(".tmp-"))
            agent.start()
            at_start[agent.hostname] = agent.spooled()
    spooled = fleet.spooled()
    stack.start_web()
    down_s = time.monotonic() - down_at
    catch_up_s = fleet.wait_drained(600)
    not_running += fleet.not_running()
    fleet.stop()

    account = fleet.account()
    corrupt = sum(1 for a in fleet.agents for p in a.spool_dir.iterdir()
                  if p.name.endswith(".corrupt"))
    kills = KILL_ROUNDS * len(fleet.agents)
    record_account(
        "8c. agents SIGKILLed while spooling", account,
        injected=f"web down; every agent (5 batches/s) SIGKILLed and restarted {KILL_ROUNDS} "
                 "times",
        duration_s=down_s, recovery_s=catch_up_s,
        notes=f"{kills} kills, {spooled} batches spooled before the server returned, "
              f"{half_written} kills left a half-written file (discarded at the next start), "
              f"{corrupt} corrupt files; a killed run's last batch, if it was being written, "
              f"is not counted (at most {kills})",
        kills=kills, corrupt=corrupt, half_written=half_written)
    assert not_running == [] and not fleet.crashed() and without_stop_line(fleet) == []
    assert account.killed_runs == kills
    assert corrupt == 0
    assert account.lost == 0, account.hosts_short()  # no gap in any run's batches
    assert account.duplicated == 0 and account.waiting <= len(fleet.agents)  # see LAST_BATCH
