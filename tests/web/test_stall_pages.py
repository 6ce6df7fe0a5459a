"""The fleet page's engine chip and the engine page's header say "stalled" when the engine
holds requests and makes no progress (controlplane.telemetry.stall), and nothing when it is
idle, busy or down."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from controlplane.fleet.models import Engine
from controlplane.telemetry.stall import stalled_engines
from tests.telemetry.rollup_data import insert_rows

RUNNING = {"up": 1, "requests_running": 6.0, "requests_waiting": 1.0}
STILL = {"generation_tokens_per_s": 0.0, "requests_finished_per_s": 0.0}
MOVING = {"generation_tokens_per_s": 500.0, "requests_finished_per_s": 2.0}


def history(engine: Engine, values, seconds: int) -> None:
    """A row every 2 s over the last ``seconds``; ``values(age)`` gives each row's values."""
    now = timezone.now()
    insert_rows("engine", [{"engine_id": engine.id, "ts": now - timedelta(seconds=age),
                            **values(age)} for age in range(seconds, 0, -2)])


@pytest.fixture
def stall_s() -> int:
    return settings.PITWALL["ENGINE_STALL_S"]


def chip(html: str, engine: Engine) -> str:
    match = re.search(rf'<a class="engine"[^>]*data-engine-id="{engine.id}".*?</a>', html, re.S)
    assert match, "no chip for the engine"
    return match.group(0)


def test_a_stalled_engine_is_marked_on_the_fleet_and_engine_pages(operator_client, page_fleet,
                                                                  stall_s):
    # progress until 150 s ago, then 7 requests held and nothing moving
    history(page_fleet.engine, lambda age: {**RUNNING, **(MOVING if age > 150 else STILL)},
            stall_s + 300)
    since = stalled_engines([page_fleet.engine.id])[page_fleet.engine.id]
    assert timedelta(seconds=146) <= timezone.now() - since <= timedelta(seconds=152)
    fleet = chip(operator_client.get("/").content.decode(), page_fleet.engine)
    assert ">stalled</span>" in fleet and f'data-stalled="{since.timestamp():.3f}"' in fleet
    html = operator_client.get(f"/engines/{page_fleet.engine.id}/").content.decode()
    head = html.split("<h1>")[1].split("</h1>")[0]
    assert "data-stalled=" in head and ">stalled 2\xa0minutes</span>" in head


@pytest.mark.parametrize("case", ["idle", "busy", "down", "young"])
def test_idle_busy_down_or_newly_quiet_engines_are_not_stalled(operator_client, page_fleet,
                                                               stall_s, case):
    values = {
        "idle": lambda age: {"up": 1, "requests_running": 0.0, "requests_waiting": 0.0,
                             **STILL},
        "busy": lambda age: {**RUNNING, **MOVING},
        "down": lambda age: {**RUNNING, **STILL, "up": 0},
        # quiet for less than the stall time
        "young": lambda age: {**RUNNING, **(MOVING if age > stall_s // 2 else STILL)},
    }[case]
    history(page_fleet.engine, values, stall_s + 60)
    assert stalled_engines() == {}
    assert "data-stalled" not in chip(operator_client.get("/").content.decode(),
                                      page_fleet.engine)
    html = operator_client.get(f"/engines/{page_fleet.engine.id}/").content.decode()
    assert "data-stalled" not in html


def test_an_engine_whose_rows_stopped_is_not_known_to_be_stalled(page_fleet, stall_s):
    now = timezone.now()
    insert_rows("engine", [{"engine_id": page_fleet.engine.id,
                            "ts": now - timedelta(seconds=age), **RUNNING, **STILL}
                           for age in range(stall_s + 120, 60, -2)])
    assert stalled_engines(now=now) == {}
    assert list(stalled_engines(now=now - timedelta(seconds=61))) == [page_fleet.engine.id]


def test_the_verdict_comes_once_the_span_is_still_not_a_freshness_margin_later(page_fleet):
    """Progress a few seconds before the span began does not hold the verdict back: only the
    span's own rows must be still (the rows before it only show the span is covered)."""
    span = 10
    history(page_fleet.engine, lambda age: {**RUNNING, **(MOVING if age > span + 1 else STILL)},
            span + 40)
    assert list(stalled_engines([page_fleet.engine.id], span_s=span)) == [page_fleet.engine.id]
    assert stalled_engines([page_fleet.engine.id], span_s=span + 4) == {}
