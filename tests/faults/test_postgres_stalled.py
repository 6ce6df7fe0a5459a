"""Case 3: PostgreSQL stalled (every process SIGSTOPped) for 60 s while the fleet streams.

The server holds its connections open and answers nothing, the worst a database can do to a
client: no error, no reset. Ingest must not hang on it: a flush that has not committed within
PITWALL_INGEST_FLUSH_TIMEOUT_S is abandoned and answered 503, later requests are shed at the
door until a new connection answers, the agents spool meanwhile, the web process's memory
stays bounded, and after the resume every sample is stored once."""

from __future__ import annotations

import http.client
import os
import threading
import time

import orjson
import pytest

from controlplane.fleet.tokens import issue_agent_token
from tests.faults.harness import FLEET_SIZE, record_account
from tests.support.polling import wait_until
from tests.telemetry.factories import batch

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]
STALL_S = float(os.environ.get("PITWALL_FAULT_STALL_S", 60))
FLUSH_TIMEOUT_S = 10  # PITWALL_INGEST_FLUSH_TIMEOUT_S, its default
MiB = 2**20


class Probe:
    """A host of its own posting one batch at a time, timing each answer. Its socket gives up
    after 3x the flush timeout: an answer later than that is a hang, and fails the case."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.token, _ = issue_agent_token("stall-probe")
        self.boot = None
        self.seq = 0
        self.answers: list[tuple[int, float, bytes | None]] = []  # status, seconds, shed

    def post(self) -> int:
        self.seq += 1
        body = batch(seq=self.seq, boot_id=self.boot, hostname="stall-probe", gpus=1)
        self.boot = body["agent"]["boot_id"]
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3 * FLUSH_TIMEOUT_S)
        began = time.monotonic()
        try:
            conn.request("POST", "/api/v1/ingest", orjson.dumps(body), {
                "Content-Type": "application/json", "Authorization": f"Bearer {self.token}"})
            response = conn.getresponse()
            reply = orjson.loads(response.read())
        finally:
            conn.close()
        if response.status == 503:
            assert response.getheader("Retry-After"), "a 503 without Retry-After"
        self.answers.append((response.status, time.monotonic() - began, reply.get("shed")))
        return response.status


class RssPeak:
    """The web process's resident memory, sampled every half second from ``start``."""

    def __init__(self, stack) -> None:
        self.stack, self.peak, self._stop = stack, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> RssPeak:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, self.stack.rss_bytes("web"))


def test_a_stalled_postgresql_holds_no_request_and_loses_nothing(stack, fleet, private_pg):
    stack.start()
    fleet.start()
    probe = Probe(stack.port)
    assert probe.post() == 200
    fleet.wait_stored(10)
    rss_before = stack.rss_bytes("web")

    private_pg.stall()
    stalled_at = time.monotonic()
    rss = RssPeak(stack).start()
    while time.monotonic() - stalled_at < STALL_S:  # every answer must come, none may hang
        probe.post()
        time.sleep(2)
    spooled_at_peak = fleet.spooled()
    during = probe.answers[1:]
    rss_during = rss.stop()

    private_pg.resume()
    resumed_at = time.monotonic()
    wait_until(lambda: probe.post() == 200, 120, lambda: f"answers: {probe.answers[-5:]}",
               every=0.5)
    stores_again_s = time.monotonic() - resumed_at
    drained_s = fleet.wait_drained(600)
    recovery_s = time.monotonic() - resumed_at
    fleet.stop()
    rss_after = stack.rss_bytes("web")

    account = fleet.account()
    slowest = max(seconds for _, seconds, _ in during)
    shed = sum(1 for _, _, why in during if why == "stalled")
    record_account(
        "3. PostgreSQL stalled", account, injected="SIGSTOP of every PostgreSQL process",
        duration_s=STALL_S, recovery_s=recovery_s,
        notes=f"{len(fleet.agents)} agents at 1 Hz; a probe posting every 2 s got "
              f"{len(during)} answers during the stall, all 503 ({shed} shed at the door as "
              f"'stalled'), the slowest after {slowest:.1f} s (flush timeout "
              f"{FLUSH_TIMEOUT_S} s); {spooled_at_peak} batches spooled at the end of the "
              f"stall; web RSS {rss_before / MiB:.0f} MiB before, peak "
              f"{rss_during / MiB:.0f} MiB during, {rss_after / MiB:.0f} MiB after; ingest "
              f"stored again {stores_again_s:.1f} s after the resume; recovery: from the "
              f"resume until every spool was empty",
        rss_mib={"before": rss_before // MiB, "peak_during": rss_during // MiB,
                 "after": rss_after // MiB},
        slowest_answer_s=round(slowest, 1), stores_again_s=round(stores_again_s, 1),
        drain_s=round(drained_s, 1))
    assert not fleet.crashed()
    assert during and {status for status, _, _ in during} == {503}
    assert shed > 0  # the writer knew it was stalled and said so at the door
    assert spooled_at_peak >= FLEET_SIZE  # the agents kept their batches
    # Bounded memory, generously: no more than 1.5 times what the process held before the
    # stall (a backlog held in memory would grow by the fleet's batches every second).
    assert rss_during <= 1.5 * rss_before
    assert account.lost == 0, account.hosts_short()
    assert account.duplicated == 0
