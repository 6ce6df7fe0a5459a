"""The fleet page's totals strip, from known newest rows: GPUs busy of the GPUs online, tokens/s
generated, requests waiting (over the hosts online now: a silent host's last values are old)
and alerts firing; the page config carries what fleet.js needs to keep the first two live."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.alerts.models import AlertRule, AlertState
from controlplane.fleet.models import Engine
from controlplane.web.views.fleet import BUSY_UTIL_PCT, fleet_rows, fleet_totals
from tests.api.helpers import insert_samples
from tests.web.helpers import page_config
from tests.web.test_alert_pages import make_alert


@pytest.fixture
def busy_fleet(page_fleet):
    """gpu0 at 91 %, gpu1 at 12 %; two engines online (3 + 2 waiting, 1200.5 + 300 tokens/s);
    the simulated host, silent past the online window, has a newer busy GPU and 40 waiting."""
    now = timezone.now()
    second = Engine.objects.create(host=page_fleet.host, name="vllm:8001/0", last_seen=now)
    ts = now - timedelta(seconds=2)
    insert_samples("gpu", [
        {"gpu_id": page_fleet.gpu0.id, "ts": ts, "util_pct": 91.0},
        {"gpu_id": page_fleet.gpu1.id, "ts": ts, "util_pct": 12.0},
        {"gpu_id": page_fleet.sim_gpu.id, "ts": ts - timedelta(minutes=3), "util_pct": 99.0}])
    insert_samples("engine", [
        {"engine_id": page_fleet.engine.id, "ts": ts, "requests_waiting": 3,
         "generation_tokens_per_s": 1200.5},
        {"engine_id": second.id, "ts": ts, "requests_waiting": 2,
         "generation_tokens_per_s": 300.0},
        {"engine_id": page_fleet.sim_engine.id, "ts": ts - timedelta(minutes=3),
         "requests_waiting": 40, "generation_tokens_per_s": 5000.0}])
    return page_fleet


def test_totals_count_the_hosts_online_from_their_newest_rows(busy_fleet):
    totals = fleet_totals(fleet_rows())
    assert (totals.gpus, totals.gpus_busy) == (2, 1)
    assert totals.generation_tokens_per_s == pytest.approx(1500.5)
    assert totals.requests_waiting == 5
    assert totals.busy_by_host == {busy_fleet.host.id: 1}
    assert totals.alerts_firing == 0


def test_a_gpu_at_the_threshold_counts_as_busy(page_fleet):
    insert_samples("gpu", [{"gpu_id": page_fleet.gpu0.id, "ts": timezone.now(),
                            "util_pct": BUSY_UTIL_PCT},
                           {"gpu_id": page_fleet.gpu1.id, "ts": timezone.now(),
                            "util_pct": BUSY_UTIL_PCT - 0.5}])
    assert fleet_totals(fleet_rows()).gpus_busy == 1


def test_without_rows_the_figures_are_unknown_not_zero(page_fleet):
    totals = fleet_totals(fleet_rows())
    assert (totals.gpus, totals.gpus_busy) == (2, 0)
    assert totals.generation_tokens_per_s is None and totals.requests_waiting is None


def strip(html: str) -> dict[str, str]:
    section = re.search(r'<section class="totals" id="fleet-totals".*?</section>', html, re.S)
    assert section, "no totals strip"
    return dict(re.findall(r'data-total="(\w+)">([^<]*)<', section.group(0)))


def test_the_page_shows_the_totals_and_hands_fleet_js_the_busy_gpus(operator_client,
                                                                    busy_fleet):
    hot, slow = (rule(name) for name in ("GPU too hot", "GPU was hot"))
    make_alert(hot, busy_fleet)
    make_alert(slow, busy_fleet, state=AlertState.RESOLVED)
    reply = operator_client.get("/")
    html = reply.content.decode()
    assert strip(html) == {"gpus_busy": "1", "gpus": "2", "generation_tokens_per_s": "1500",
                           "requests_waiting": "5", "alerts_firing": "1"}
    assert page_config(reply)["totals"] == {"busy_util_pct": BUSY_UTIL_PCT,
                                            "busy_by_host": {str(busy_fleet.host.id): 1},
                                            "tokens_by_host": {str(busy_fleet.host.id): 1500.5}}


def rule(name: str) -> AlertRule:
    made = AlertRule(name=name, metric="gpu.temp_c", aggregation="max", window_s=60, op=">",
                     threshold=85, severity="critical", summary="hot")
    made.full_clean()
    made.save()
    return made
