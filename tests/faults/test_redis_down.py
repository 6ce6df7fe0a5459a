"""Case 4: Redis (Celery's broker and the channel layer) stopped for two minutes while the fleet
streams, then started again on the same port, empty.

Nothing that stores or reads data needs Redis: ingest answers 200 throughout (the agents spool
nothing) and the history API reads through the outage. Alert evaluation goes on: beat runs the
alert cycle itself while it cannot publish (controlplane/beat.py), so a rule created during the
outage fires, and its webhook is delivered, before Redis returns. Live push stops: the open
socket is closed with 1013 (try again), and so is one opened during the outage. When Redis is
back, without restarting anything: beat publishes again and sends the tasks it delayed, the
worker runs them (a rollup), a new socket receives live events, and once the worker has had
time to reconnect beat hands the alert cycle back to it.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from controlplane.alerts.models import AlertEvent, AlertRule
from controlplane.fleet.tokens import issue_agent_token
from tests.alerts.delivery.helpers import route_to_webhook
from tests.faults.harness import FLEET_SIZE, query, record_account
from tests.realtime.helpers import session_headers
from tests.support.live import HookReceiver
from tests.support.polling import wait_until
from tests.telemetry.factories import batch

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]
DOWN_S = float(os.environ.get("PITWALL_FAULT_REDIS_DOWN_S", 90))
EVERY_S = 5  # the checks during the outage: a probe post, a history read, the canary rule
WAIT_S = 120  # only so that a broken build fails instead of hanging; never asserted on
CANARY = "Redis-down canary: GPU above 20 °C"  # the simulated GPUs idle at 30 °C and up
ROLL_UP = "controlplane.telemetry.tasks.roll_up"
EVALUATE = "controlplane.alerts.tasks.evaluate_rules"


def make_canary(receiver: HookReceiver) -> AlertRule:
    """A rule every simulated GPU satisfies, firing after 20 s, routed to ``receiver``."""
    rule = AlertRule(name=CANARY, metric="gpu.temp_c", aggregation="max", window_s=30, op=">",
                     threshold=20, for_s=20, severity="warning", summary="{host}: {value:.0f}")
    rule.full_clean()
    rule.save()
    route_to_webhook(CANARY, receiver.url, name="redis-down", secret="redis-down-s3")
    return rule


class Probe:
    """A host of its own posting one batch at a time: the answers ingest gave."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/api/v1/ingest"
        self.token, _ = issue_agent_token("redis-down-probe")
        self.boot: str | None = None
        self.seq = 0
        self.statuses: list[int] = []

    def post(self) -> int:
        self.seq += 1
        body = batch(seq=self.seq, boot_id=self.boot, hostname="redis-down-probe", gpus=1)
        self.boot = body["agent"]["boot_id"]
        request = urllib.request.Request(self.url, data=orjson.dumps(body), method="POST",
                                         headers={"Authorization": f"Bearer {self.token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                status = reply.status
        except urllib.error.HTTPError as error:
            status = error.code
        self.statuses.append(status)
        return status


class Browser:
    """A signed-in browser's session: live sockets and history reads, as a page makes them."""

    def __init__(self, port: int) -> None:
        self.port = port
        cookie = dict(session_headers("redis-down-viewer"))[b"cookie"].decode()
        self.headers = {"Cookie": cookie, "Origin": f"http://127.0.0.1:{port}"}

    def history(self, hostname: str, since: float) -> tuple[int, float | None]:
        """GET /api/v1/series/ for one host's CPU since ``since``: status, newest point's ts."""
        query_string = urllib.parse.urlencode({"metric": "host.cpu_pct", "entity": hostname,
                                               "start": since, "max_points": 2000})
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/v1/series/?{query_string}", headers=self.headers)
        with urllib.request.urlopen(request, timeout=30) as reply:
            body = orjson.loads(reply.read())
            points = [ts for s in body["series"] for ts, _ in s["points"]]
            return reply.status, max(points, default=None)

    async def socket(self):
        socket = await connect(f"ws://127.0.0.1:{self.port}/ws/live/",
                               additional_headers=self.headers)
        await socket.send(orjson.dumps({"type": "subscribe", "groups": ["fleet"]}).decode())
        return socket

    def try_live(self) -> tuple[str, int | None]:
        """A new socket: ("event", None) once a fleet event arrives, or ("closed", code)."""

        async def attempt() -> tuple[str, int | None]:
            try:
                socket = await self.socket()
                async with asyncio.timeout(WAIT_S), socket:
                    while orjson.loads(await socket.recv())["type"] != "fleet":
                        pass
                    return "event", None
            except ConnectionClosed as closed:
                return "closed", closed.rcvd.code if closed.rcvd else None
            except OSError:
                return "closed", None

        return asyncio.run(attempt())


class OpenSocket:
    """One socket kept open from before the outage, in a thread of its own: when its fleet
    events arrived, and the close code and time when the server ended it."""

    def __init__(self, browser: Browser) -> None:
        self.browser = browser
        self.events: list[float] = []
        self.closed: tuple[int | None, float] | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> OpenSocket:
        self._thread.start()
        return self

    async def _run(self) -> None:
        try:
            async with await self.browser.socket() as socket:
                async with asyncio.timeout(DOWN_S + 2 * WAIT_S):
                    while True:
                        if orjson.loads(await socket.recv())["type"] == "fleet":
                            self.events.append(time.time())
        except ConnectionClosed as closed:
            self.closed = (closed.rcvd.code if closed.rcvd else None, time.time())


def log_of(stack, name: str) -> str:
    return Path(stack.services[name].log).read_text(errors="replace")


def worker_ran(stack, task: str, after: int) -> bool:
    """Whether the worker's log shows a run of ``task`` that succeeded, past ``after``."""
    return any(f"{task}[" in line and "succeeded" in line
               for line in log_of(stack, "worker")[after:].splitlines())


def last_evaluated(rule_id: int) -> float | None:
    rows = query("SELECT extract(epoch FROM last_evaluated_at) FROM alerts_alertrule "
                 "WHERE id = %s", (rule_id,))
    return float(rows[0][0]) if rows and rows[0][0] is not None else None


def fired_at(rule_id: int) -> float | None:
    rows = query("SELECT extract(epoch FROM min(e.at)) FROM alerts_alertevent e JOIN "
                 "alerts_alert a ON a.id = e.alert_id WHERE a.rule_id = %s AND "
                 "e.to_state = 'firing'", (rule_id,))
    return float(rows[0][0]) if rows[0][0] is not None else None


def test_redis_down_for_two_minutes_stops_only_live_push_and_everything_resumes_by_itself(
        stack, fleet, private_redis):
    stack.start()
    fleet.start()
    fleet.wait_stored(10)
    wait_until(lambda: "evaluate_rules[" in log_of(stack, "worker"), WAIT_S,
               lambda: f"the worker never evaluated:\n{stack.log('worker')[-3000:]}")
    browser, probe, receiver = Browser(stack.port), Probe(stack.port), HookReceiver().start()
    watcher = OpenSocket(browser).start()
    wait_until(lambda: watcher.events, WAIT_S, lambda: "no live fleet event before the outage")
    watched_host = fleet.agents[0].hostname

    private_redis.stop()
    down_at = time.time()
    rule = make_canary(receiver)  # created while Redis is down: only beat can fire it
    during_socket = browser.try_live()
    evaluations: set[float] = set()
    history: list[tuple[int, float | None, float]] = []  # status, newest point, read at
    spooled_peak = 0
    while time.time() - down_at < DOWN_S:
        probe.post()
        spooled_peak = max(spooled_peak, fleet.spooled())
        history.append((*browser.history(watched_host, down_at - 60), time.time()))
        evaluations.add(last_evaluated(rule.id) or 0.0)
        time.sleep(max(0.0, EVERY_S - (time.time() - history[-1][2])))
    fired, webhooks = fired_at(rule.id), [p["at"] for p in receiver.posts]
    answered = list(probe.statuses)
    worker_log_at = len(log_of(stack, "worker"))

    private_redis.start()
    up_at = time.time()
    back: dict[str, float] = {}  # seconds after the start until each came back
    checks = {"beat": lambda: "the broker answers again" in log_of(stack, "beat"),
              "worker": lambda: worker_ran(stack, ROLL_UP, worker_log_at),
              "live": lambda: browser.try_live()[0] == "event"}

    def all_back() -> bool:
        evaluations.add(last_evaluated(rule.id) or 0.0)
        for name, check in checks.items():
            if name not in back and check():
                back[name] = time.time() - up_at
        return len(back) == len(checks)

    wait_until(all_back, WAIT_S, lambda: f"back: {back}\nbeat:\n{stack.log('beat')[-2000:]}"
                                         f"\nworker:\n{stack.log('worker')[-2000:]}")
    beat_s, worker_s, live = back["beat"], back["worker"], back["live"]
    # Beat hands the alert cycle back to the worker (WORKER_RECONNECT_S after the start).
    wait_until(lambda: evaluations.add(last_evaluated(rule.id) or 0.0)
               or worker_ran(stack, EVALUATE, worker_log_at), WAIT_S,
               lambda: f"the worker never evaluated again:\n{stack.log('worker')[-2000:]}",
               every=1)
    handed_back_s = time.time() - up_at
    evaluations.add(last_evaluated(rule.id) or 0.0)
    probe.post()
    alive = [stack.services[name].running() for name in ("web", "worker", "beat")]
    fleet.wait_drained(60)
    fleet.stop()
    receiver.stop()

    account = fleet.account()
    evaluated_during = sorted(t for t in evaluations if down_at < t < up_at)
    evaluated = sorted(t for t in evaluations if t > down_at)
    longest_gap = max(b - a for a, b in zip(evaluated, evaluated[1:], strict=False))
    newest_lag = max(read_at - (newest or 0) for _, newest, read_at in history)
    record_account(
        "4. Redis down", account, injected="redis-server stopped, started again empty",
        duration_s=up_at - down_at, recovery_s=max(beat_s, worker_s, live),
        notes=f"{len(fleet.agents)} agents at 1 Hz; during the outage: ingest answered "
              f"{len(answered)} probe posts with {sorted(set(answered))}, "
              f"{spooled_peak} batches spooled at most; {len(history)} history reads, all "
              f"{sorted({s for s, _, _ in history})}, the newest point at most "
              f"{newest_lag:.0f} s old; the canary rule (created after Redis stopped) "
              f"evaluated by beat {len(evaluated_during)} times, fired "
              f"{(fired or up_at) - down_at:.0f} s and its webhook arrived "
              f"{min(webhooks, default=up_at) - down_at:.0f} s into the outage; the open "
              f"live socket closed with {watcher.closed and watcher.closed[0]}, a new one "
              f"with {during_socket[1]}; after the start: beat published again after "
              f"{beat_s:.1f} s, the worker ran a rollup after {worker_s:.1f} s, a new socket "
              f"had live events after {live:.1f} s, the worker evaluated again after "
              f"{handed_back_s:.0f} s; the canary's longest gap between two evaluations, "
              f"from its creation on: {longest_gap:.0f} s (interval 10 s); no process "
              f"restarted; recovery: the slowest of beat, worker and live push",
        beat_s=round(beat_s, 1), worker_s=round(worker_s, 1), live_s=round(live, 1),
        canary_fired_s=None if fired is None else round(fired - down_at, 1),
        worker_evaluates_again_s=round(handed_back_s, 1),
        longest_evaluation_gap_s=round(longest_gap, 1))

    assert not fleet.crashed()
    assert account.lost == 0, account.hosts_short()
    assert account.duplicated == 0
    # Ingest never needed Redis: every answer 200, nothing spooled.
    assert set(answered) == {200} and probe.statuses[-1] == 200 and spooled_peak == 0
    assert {status for status, _, _ in history} == {200}
    assert all(newest is not None and newest > down_at for _, newest, _ in history[1:])
    assert len(evaluated_during) >= 2  # evaluation went on (by beat) through the outage
    assert fired is not None and down_at < fired < up_at
    assert webhooks and down_at < min(webhooks) < up_at  # notified without the broker
    assert watcher.closed is not None and watcher.closed[0] == 1013
    assert during_socket == ("closed", 1013)
    assert alive == [True, True, True]
    assert AlertEvent.objects.filter(alert__rule=rule, to_state="firing").exists()
    assert len(fleet.agents) == FLEET_SIZE
