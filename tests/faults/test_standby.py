"""Case 9: reads from a streaming standby, and the standby falling behind.

A real standby of the suite's PostgreSQL (``pg_basebackup -R``, tests/faults/standby.py)
serves the web process's GET requests: the hosts API (the ORM, through the router) and the
Prometheus export (raw SQL on ``django.db.connection``), as its statement log shows; a PATCH
writes on the primary. Then the standby's replay is paused and the primary writes a new host:
within the lag limit plus a check the API lists it, which the standby cannot have (it still
lacks the host), so the reads went to the primary. Replay resumed, the reads come back to the
standby; the standby stopped, they go to the primary again. No request fails on the way."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone

from controlplane.accounts.roles import DEPLOYER
from controlplane.fleet.models import Host
from controlplane.fleet.tokens import issue_api_token
from tests.faults.harness import PrivatePostgres, Stack, record
from tests.faults.standby import WEB, PrivateStandby
from tests.support.polling import wait_until
from tests.support.roles import user_with_role

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]
MAX_LAG_S = 2.0  # PITWALL_STANDBY_MAX_LAG_S: small, so the case is short
CHECK_S = 0.5  # PITWALL_STANDBY_CHECK_INTERVAL_S


@pytest.fixture
def standby(private_pg: PrivatePostgres, transactional_db) -> Iterator[PrivateStandby]:
    """Made after the test database, so the copy holds it; requested before ``stack``, so it
    stops after the web process that reads from it."""
    replica = PrivateStandby(private_pg).init()
    replica.start()
    yield replica
    replica.destroy()


@dataclass
class Api:
    """The API as a client sees it, counting the requests and the ones that failed."""

    url: str
    token: str
    sent: int = 0
    failed: int = 0

    def call(self, method: str, path: str, body: dict | None = None,
             session: str | None = None) -> tuple[bytes, Message]:
        """A request with the API token, or with the browser session ``session``."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if session is None:
            headers["Authorization"] = f"Bearer {self.token}"
        else:
            headers["Cookie"] = f"{settings.SESSION_COOKIE_NAME}={session}"
        request = urllib.request.Request(self.url + path, method=method, data=data,
                                         headers=headers)
        self.sent += 1
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                # A page that sends the session to the sign-in page did not see the session.
                assert response.url == self.url + path, f"{path} redirected to {response.url}"
                return response.read(), response.headers
        except urllib.error.HTTPError as exc:
            self.failed += 1
            raise AssertionError(f"{method} {path}: {exc.code} {exc.read()[:500]!r}") from exc

    def hostnames(self) -> set[str]:
        body, _ = self.call("GET", "/api/v1/hosts/")
        return {row["hostname"] for row in json.loads(body)["results"]}


def browser_session(user) -> str:
    """A signed-in session, as the sign-in page would leave it (stored on the primary)."""
    browser = Client()
    browser.force_login(user)
    return browser.cookies[settings.SESSION_COOKIE_NAME].value


def has_host(replica: PrivateStandby, hostname: str) -> bool:
    return bool(replica.run("SELECT 1 FROM fleet_host WHERE hostname = %s", (hostname,),
                            database=connection.settings_dict["NAME"]))


def test_reads_follow_the_standby_while_it_keeps_up(standby: PrivateStandby,
                                                    stack: Stack) -> None:
    reader = user_with_role("standby-reader", DEPLOYER)
    api_token = issue_api_token("standby-reader")
    first = Host.objects.create(hostname="standby-host-1", last_seen=timezone.now())
    wait_until(lambda: has_host(standby, first.hostname), 30, lambda: standby.tail())
    stack.configure(PITWALL_STANDBY_DATABASE_URL=standby.url(connection.settings_dict["NAME"]),
                    PITWALL_STANDBY_MAX_LAG_S=str(MAX_LAG_S),
                    PITWALL_STANDBY_CHECK_INTERVAL_S=str(CHECK_S))
    stack.start_web()
    api = Api(stack.url, api_token)

    # Reads: the ORM's (the hosts) and raw SQL's (the export, the series, efficiency, the
    # pages) run on the standby: each request's statements are in its log.
    began = standby.log_size()
    assert api.hostnames() == {"standby-host-1"}
    assert any("ORDER BY" in line for line in standby.statements_since(began, "fleet_host"))
    session = browser_session(reader)
    for path, session_or_token in [
            ("/api/v1/export/prometheus", None),
            ("/api/v1/series/?metric=host.cpu_pct&entity=standby-host-1", None),
            ("/api/v1/efficiency/engines/", None),
            ("/", session),
            (f"/hosts/{first.id}/", session)]:
        began = standby.log_size()
        api.call("GET", path, session=session_or_token)
        assert standby.statements_since(began, "SELECT", app=WEB), \
            f"{path}: no statement on the standby:\n{standby.tail(2000)}"

    # A write: on the primary (the standby refuses writes), and the client is pinned to it.
    _, headers = api.call("PATCH", f"/api/v1/hosts/{first.id}/", {"labels": {"rack": "r1"}})
    first.refresh_from_db()
    assert first.labels == {"rack": "r1"}
    assert "pitwall_read_primary=" in headers.get("Set-Cookie", "")

    # The standby stops replaying; the primary writes on: reads move to the primary.
    standby.run("SELECT pg_wal_replay_pause()")
    paused_at = time.monotonic()
    Host.objects.create(hostname="standby-host-2", last_seen=timezone.now())
    wait_until(lambda: "standby-host-2" in api.hostnames(), 30,
               lambda: f"the new host never listed:\n{stack.log('web')[-3000:]}")
    moved_s = time.monotonic() - paused_at
    assert not has_host(standby, "standby-host-2"), "the standby replayed while paused"
    assert "standby skipped, reads go to the primary: behind" in stack.log("web")
    began = standby.log_size()
    api.hostnames()
    assert not [line for line in standby.statements_since(began, "fleet_host")
                if "ORDER BY" in line], "a read went to the standby that is behind"

    # Replay resumed: it catches up and the reads come back.
    standby.run("SELECT pg_wal_replay_resume()")
    resumed_at = time.monotonic()

    def served_by_standby() -> bool:
        offset = standby.log_size()
        listed = api.hostnames()
        return "standby-host-2" in listed and any(
            "ORDER BY" in line for line in standby.statements_since(offset, "fleet_host"))

    wait_until(served_by_standby, 30, lambda: stack.log("web")[-3000:])
    back_s = time.monotonic() - resumed_at
    assert "; it was behind" in stack.log("web")

    # The standby stops: the next check finds it down, and the reads go to the primary.
    standby.stop("fast")
    stopped_at = time.monotonic()
    time.sleep(CHECK_S)  # the last check is an interval old: the next request checks
    assert "standby-host-2" in api.hostnames()
    assert "standby skipped, reads go to the primary: down" in stack.log("web")
    down_s = time.monotonic() - stopped_at
    assert api.failed == 0

    record("9. standby behind", injected=f"standby replay paused (pg_wal_replay_pause) while "
           f"the primary writes; standby limit {MAX_LAG_S:g} s, checked every {CHECK_S:g} s",
           duration_s=resumed_at - paused_at, unit="reads", expected=api.sent,
           stored=api.sent - api.failed, lost=api.failed, duplicated=0, recovery_s=back_s,
           notes=f"reads served by the standby (its statement log), then by the primary "
                 f"{moved_s:.1f} s after the pause (a host only the primary had was listed), "
                 f"back on the standby {back_s:.1f} s after the resume; stopped, skipped at "
                 f"the next check ({down_s:.1f} s); the write (PATCH) on the primary; "
                 f"0 failed requests")
