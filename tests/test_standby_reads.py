"""Reads from a streaming standby (controlplane/lib/standby, docs/standby.md), the parts a
standby is not needed for: off by default, the settings a standby adds, the lag arithmetic,
the router's choices, the requests that always read the primary, and the watch's verdict on
a server that is no standby and on one that does not answer. tests/faults/test_standby.py
runs it all against a real standby."""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from controlplane.fleet.models import ApiToken, Host
from controlplane.lib.standby import router
from controlplane.lib.standby.middleware import PIN_COOKIE, ReadFromStandby
from controlplane.lib.standby.watch import Backlog, LagWatch, conninfo
from controlplane.telemetry.models import HistogramLayout
from tests.support.live import free_port

SETTINGS = Path(__file__).resolve().parents[1] / "controlplane" / "settings.py"
MIDDLEWARE = "controlplane.lib.standby.middleware.ReadFromStandby"


def test_without_a_standby_nothing_changes() -> None:
    assert list(settings.DATABASES) == ["default"]
    assert settings.DATABASE_ROUTERS == []
    assert MIDDLEWARE not in settings.MIDDLEWARE


def test_a_standby_adds_its_alias_the_primary_s_router_and_middleware(monkeypatch) -> None:
    monkeypatch.setenv("SECRET_KEY", "x")
    monkeypatch.setenv("DATABASE_URL", "postgres://app@db1:5432/pitwall")
    monkeypatch.setenv("PITWALL_STANDBY_DATABASE_URL", "postgres://app@db2:5433/pitwall")
    loaded = runpy.run_path(str(SETTINGS))
    databases = loaded["DATABASES"]
    assert set(databases) == {"default", "primary", "standby"}
    assert (databases["standby"]["HOST"], databases["standby"]["PORT"]) == ("db2", "5433")
    assert databases["primary"]["HOST"] == databases["default"]["HOST"] == "db1"
    # One database: the tests make no copy of it under the other names.
    assert databases["standby"]["TEST"] == databases["primary"]["TEST"] == {"MIRROR": "default"}
    assert databases["standby"]["OPTIONS"]["pool"] == databases["default"]["OPTIONS"]["pool"]
    assert loaded["DATABASE_ROUTERS"] == ["controlplane.lib.standby.router.StandbyRouter"]
    assert loaded["MIDDLEWARE"][-1] == MIDDLEWARE


def test_a_primary_that_writes_nothing_leaves_no_lag() -> None:
    backlog = Backlog()
    for now in range(100):  # an idle primary: its position never moves
        assert backlog.lag(float(now), 500, 500, replay_age=3600.0) == 0.0


def test_the_lag_is_the_age_of_the_oldest_position_not_replayed() -> None:
    backlog = Backlog()
    assert backlog.lag(0.0, 100, 100, replay_age=1.0) == 0.0
    # Replay stops at 100 while the primary goes on: the position read at 1 s ages.
    assert backlog.lag(1.0, 200, 100, replay_age=1.5) == 1.0  # < both upper bounds
    assert backlog.lag(2.0, 300, 100, replay_age=2.5) == 1.0
    assert backlog.lag(4.5, 300, 100, replay_age=5.0) == 3.5
    # It replays up to 200: the position read at 2 s is the oldest waiting.
    assert backlog.lag(5.0, 300, 200, replay_age=0.1) == 3.0
    assert backlog.lag(6.0, 300, 300, replay_age=0.1) == 0.0


def test_a_position_read_just_now_takes_the_smaller_upper_bound() -> None:
    backlog = Backlog()
    # Never seen caught up, nothing replayed since it started: it cannot be vouched for.
    assert backlog.lag(0.0, 100, 50, replay_age=None) == math.inf
    fresh = Backlog()
    assert fresh.lag(0.0, 100, 100, replay_age=None) == 0.0
    # Caught up 0.5 s ago; its last replayed transaction is a minute old (an idle primary).
    assert fresh.lag(0.5, 120, 100, replay_age=60.0) == 0.5


def test_the_router_has_no_say_outside_a_standby_read() -> None:
    routing = router.StandbyRouter()
    assert routing.db_for_read(HistogramLayout) is None
    assert routing.db_for_write(Host) is None
    assert routing.allow_migrate("default", "fleet")
    assert not routing.allow_migrate("standby", "fleet")
    assert not routing.allow_migrate("primary", "fleet")


def test_inside_a_standby_read_only_telemetry_and_fleet_reads_go_there() -> None:
    routing = router.StandbyRouter()
    token = router._reading.set(True)
    try:
        assert routing.db_for_read(HistogramLayout) == "standby"
        assert routing.db_for_read(Host) == "standby"
        assert routing.db_for_read(ApiToken) == "primary"  # a revoked token stops at once
        assert routing.db_for_read(get_user_model()) == "primary"
        assert routing.db_for_write(Host) == "primary"
    finally:
        router._reading.reset(token)


@pytest.mark.django_db
def test_a_server_that_is_not_in_recovery_is_not_read_from() -> None:
    """The primary itself as the "standby": a promoted standby looks the same."""
    here = connection.settings_dict
    watch = LagWatch(here, here, max_lag_s=5, interval_s=1)
    try:
        assert not watch.usable()
        assert watch.verdict.reason == "promoted"
    finally:
        watch.close()


@pytest.mark.django_db
def test_a_standby_that_does_not_answer_is_skipped_and_asked_once_an_interval() -> None:
    now = [0.0]
    gone = {**connection.settings_dict, "HOST": "127.0.0.1", "PORT": str(free_port())}
    watch = LagWatch(connection.settings_dict, gone, max_lag_s=5, interval_s=1,
                     clock=lambda: now[0])
    try:
        assert not watch.usable()
        first = watch.verdict
        assert first.reason == "down" and "connection" in first.detail.lower()
        now[0] = 0.5
        assert not watch.usable() and watch.verdict is first  # not asked again yet
        now[0] = 1.0
        assert not watch.usable() and watch.verdict is not first
    finally:
        watch.close()


def test_conninfo_keeps_libpq_options_and_drops_django_s() -> None:
    info = conninfo({"NAME": "pitwall", "USER": "app", "PASSWORD": "", "HOST": "db2",
                     "PORT": "5433", "OPTIONS": {"sslmode": "require", "pool": {"max_size": 8}}})
    assert set(info.split()) == {"dbname=pitwall", "user=app", "host=db2", "port=5433",
                                 "sslmode=require"}


def _answer_noting_where_it_read(request: HttpRequest) -> HttpResponse:
    return HttpResponse("standby" if router.reading() else "primary")


def test_a_write_pins_its_client_to_the_primary_for_the_lag_limit_and_a_check(settings) -> None:
    settings.STANDBY_MAX_LAG_S, settings.STANDBY_CHECK_INTERVAL_S = 5.0, 0.5
    middleware = ReadFromStandby(_answer_noting_where_it_read)
    written = middleware(RequestFactory().post("/api/v1/silences/"))
    assert written.content == b"primary"
    assert written.cookies[PIN_COOKIE]["max-age"] == 6
    pinned = RequestFactory().get("/api/v1/hosts/")
    pinned.COOKIES[PIN_COOKIE] = "1"
    assert middleware(pinned).content == b"primary"


@pytest.mark.parametrize("path", ["/admin/fleet/host/", "/healthz", "/api/v1/agent/config"])
def test_the_admin_health_and_agents_read_the_primary(path: str) -> None:
    middleware = ReadFromStandby(_answer_noting_where_it_read)
    assert middleware(RequestFactory().get(path)).content == b"primary"
