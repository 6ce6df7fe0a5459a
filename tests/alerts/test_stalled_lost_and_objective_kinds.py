"""The named kinds for stalled engines, lost GPUs and latency objectives end to end: samples
posted to the real ingest app (as an agent sends them, timestamps a second or so old), then a
real evaluation cycle at the present instant. Each kind fires on its trouble and stays silent
on the healthy case beside it:

- ``engine_stalled``: requests held, no token and no finished request (an idle engine and a
  down one are not stalled);
- ``gpu_lost``: a GPU gone from the inventory while its host reports, or reported lost by
  NVML (a present GPU is not lost; a silent host is the agent-offline rule's);
- ``objective_attainment`` and ``error_budget_burn``: from the summed TTFT/ITL buckets (an
  engine within its objective is silent; a burn that ended five minutes ago is over).
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import Alert, AlertRule, RuleKind
from controlplane.fleet.models import Engine, Gpu
from controlplane.telemetry.stall import stalled_engines
from tests.support.alert_data import rule
from tests.telemetry.factories import batch

HOST = "gpu-node-1"
TTFT_LE = [0.5, 1.0, 2.0, 4.0]  # the 2-s objective falls on a bound: exact shares
FAST, SLOW = [10, 0, 0, 0, 0], [0, 0, 0, 5, 5]
ITL_LE = [0.05, 0.1, 0.2]


class Agent:
    """One host's agent: posts samples of its engines and GPUs through the ingest app."""

    def __init__(self, ingest, token: str, engines: tuple[str, ...] = ("vllm:8000/0",),
                 gpus: int = 2) -> None:
        self.ingest, self.token, self.engines, self.gpus = ingest, token, engines, gpus
        self.boot, self.seq = str(uuid.uuid4()), 0

    def post(self, samples: list[dict]) -> None:
        self.seq += 1
        body = batch(self.seq, self.boot, samples=samples, hostname=HOST, gpus=self.gpus,
                     engines=self.engines)
        code, reply = self.ingest.post(body, self.token)
        assert code == 200 and reply["accepted"] == len(samples), reply

    def history(self, seconds: int, step: int, engine, gpu=None) -> None:
        """Samples every ``step`` s over the last ``seconds`` s; ``engine(name, age)`` and
        ``gpu(index, age)`` give each one's values at ``age`` seconds before now."""
        now = time.time()
        samples = []
        for age in range(seconds, -1, -step):
            samples.append({
                "ts": now - age,
                "host": {"cpu_pct": 20.0},
                "gpus": [{"uuid": f"GPU-{HOST}-{i}", "util_pct": 90.0,
                          **(gpu(i, age) if gpu else {})} for i in range(self.gpus)],
                "engines": [{"name": name, **engine(name, age)} for name in self.engines]})
        self.post(samples)


def fired(rule_: AlertRule) -> dict[str, Alert]:
    """Evaluate one rule now; its firing alerts by engine name or GPU uuid."""
    evaluate(timezone.now(), rule_ids=[rule_.id])
    return {a.labels.get("engine") or a.labels.get("gpu"): a
            for a in Alert.objects.filter(rule=rule_, state="firing")}


def pack_rule(key: str) -> AlertRule:
    return AlertRule.objects.get(pack_key=key)


# engine_stalled ---------------------------------------------------------------------------

STALL_ENGINES = ("stalled:8000", "idle:8001", "down:8002", "busy:8003")


def stall_values(name: str, age: int) -> dict:
    running = {"idle:8001": 0, "busy:8003": 12}.get(name, 7)
    moving = name == "busy:8003"
    return {"up": 0 if name == "down:8002" else 1, "requests_running": running,
            "requests_waiting": 2 if name == "stalled:8000" else 0,
            "generation_tokens_per_s": 400.0 if moving else 0.0,
            "requests_finished_per_s": 1.5 if moving else 0.0}


def test_an_engine_holding_requests_without_progress_is_stalled(ingest, host_token, settings):
    """Stalled: 9 requests held for longer than ENGINE_STALL_S with no token and no finished
    request. Idle (nothing held), down (up 0, its last gauges still held) and busy engines are
    not; the page's function and the alert agree."""
    agent = Agent(ingest, host_token, engines=STALL_ENGINES)
    agent.history(settings.PITWALL["ENGINE_STALL_S"] + 30, 2, stall_values)
    alerts = fired(pack_rule("engine-stalled"))
    assert sorted(alerts) == ["stalled:8000"]
    alert = alerts["stalled:8000"]
    assert alert.value == 9  # 7 running + 2 waiting
    assert alert.labels["severity"] == "critical"
    assert "9 requests held" in alert.summary and "stalled:8000" in alert.summary
    engines = dict(Engine.objects.values_list("name", "id"))
    stalled = stalled_engines(engines.values())
    assert list(stalled) == [engines["stalled:8000"]]
    began = timezone.now() - stalled[engines["stalled:8000"]]
    assert began >= timedelta(seconds=settings.PITWALL["ENGINE_STALL_S"])


def test_an_engine_stalled_for_less_than_the_stall_time_is_not_yet(ingest, host_token,
                                                                    settings):
    stall_s = settings.PITWALL["ENGINE_STALL_S"]
    agent = Agent(ingest, host_token)

    def values(name: str, age: int) -> dict:
        moving = age > stall_s // 2  # progress until half the stall time ago
        return {"up": 1, "requests_running": 4, "requests_waiting": 0,
                "generation_tokens_per_s": 300.0 if moving else 0.0,
                "requests_finished_per_s": 1.0 if moving else 0.0}

    agent.history(stall_s + 30, 2, values)
    assert fired(pack_rule("engine-stalled")) == {}
    assert stalled_engines() == {}


# gpu_lost ---------------------------------------------------------------------------------

def test_a_gpu_gone_from_the_inventory_while_its_host_reports_is_lost(ingest, host_token):
    agent = Agent(ingest, host_token, gpus=2)
    agent.history(20, 5, lambda name, age: {"up": 1})
    lost = pack_rule("gpu-lost")
    assert fired(lost) == {}  # both present
    agent.gpus = 1  # NVML no longer lists GPU 1: the agent's inventory lacks it
    agent.history(10, 5, lambda name, age: {"up": 1})
    assert not Gpu.objects.get(uuid=f"GPU-{HOST}-1").present
    alerts = fired(lost)
    assert sorted(alerts) == [f"GPU-{HOST}-1"]
    alert = alerts[f"GPU-{HOST}-1"]
    assert alert.labels["severity"] == "critical" and alert.labels["host"] == HOST
    assert f"{HOST} GPU 1 (GPU-{HOST}-1) is lost" in alert.summary


def test_a_lost_gpu_of_a_host_that_fell_silent_is_left_to_the_agent_offline_rule(
        ingest, host_token):
    agent = Agent(ingest, host_token, gpus=2)
    agent.history(10, 5, lambda name, age: {"up": 1})
    agent.gpus = 1  # its last inventory lacked GPU 1, then the host went silent
    agent.history(10, 5, lambda name, age: {"up": 1})
    later = timezone.now() + timedelta(minutes=5)
    evaluate(later, rule_ids=[pack_rule("gpu-lost").id, pack_rule("agent-offline").id])
    firing = Alert.objects.filter(state="firing")
    assert [a.rule.pack_key for a in firing] == ["agent-offline"]


def test_a_gpu_nvml_reports_lost_is_lost(ingest, host_token):
    agent = Agent(ingest, host_token, gpus=2)
    agent.history(30, 5, lambda name, age: {"up": 1},
                  gpu=lambda i, age: {"lost": int(i == 1 and age <= 10)})
    alerts = fired(pack_rule("gpu-lost"))
    assert sorted(alerts) == [f"GPU-{HOST}-1"]
    assert alerts[f"GPU-{HOST}-1"].value == 1  # NVML said so (2: gone from the inventory)


# objective attainment and error-budget burn -----------------------------------------------

def ttft(counts: list[int]) -> dict:
    return {"ttft_seconds": {"le": TTFT_LE, "counts": counts, "sum": 1.0}}


def test_attainment_below_its_target_fires_and_a_fast_engine_does_not(ingest, host_token):
    agent = Agent(ingest, host_token, engines=("fast:8000", "half:8001"))
    agent.history(120, 5, lambda name, age: {
        "up": 1, **ttft(FAST if name == "fast:8000" else [2, 1, 1, 2, 2]),
        "itl_seconds": {"le": ITL_LE, "counts": [8, 0, 0, 0] if name == "fast:8000"
                        else [2, 2, 2, 2], "sum": 1.0}})
    under = dict(kind=RuleKind.OBJECTIVE_ATTAINMENT, window_s=60, op="<", threshold=0.99)
    alerts = fired(rule(name="TTFT attainment", params={"objective": "ttft"}, **under))
    assert sorted(alerts) == ["half:8001"]
    assert alerts["half:8001"].value == pytest.approx(0.5)  # 4 of 8 within 2 s
    alerts = fired(rule(name="TTFT within 4 s", params={"objective": "ttft",
                                                         "objective_ms": 4000}, **under))
    assert alerts["half:8001"].value == pytest.approx(0.75)
    alerts = fired(rule(name="ITL attainment", params={"objective": "itl"}, **under))
    assert sorted(alerts) == ["half:8001"]
    assert alerts["half:8001"].value == pytest.approx(0.5)  # 4 of 8 within 100 ms


def test_a_fast_burn_fires_over_both_windows_and_not_once_it_has_ended(ingest, host_token):
    """The pack's TTFT burn rule: burn > 14.4 over 1 h and over 5 min. 'now' has been slow for
    10 minutes (1 h: 16.7x, 5 min: 100x); 'past' was slow for 20 minutes until 15 minutes ago
    (1 h: 33x, 5 min: 0): its trouble is over; 'fast' never was; 'rare' served 30 requests in
    the hour, all slow: fewer than the rule's min_observations (100), not judged."""
    agent = Agent(ingest, host_token,
                  engines=("fast:8000", "now:8001", "past:8002", "rare:8003"))

    def values(name: str, age: int) -> dict:
        if name == "rare:8003":
            return {"up": 1, **(ttft(SLOW) if age < 30 else {})}
        slow = (name == "now:8001" and age < 600) or (name == "past:8002"
                                                      and 900 <= age < 2100)
        return {"up": 1, **ttft(SLOW if slow else FAST)}

    agent.history(3600, 10, values)
    alerts = fired(pack_rule("ttft-budget-burn"))
    assert sorted(alerts) == ["now:8001"]
    assert alerts["now:8001"].value == pytest.approx(100 * 60 / 361, rel=0.05)
    assert alerts["now:8001"].labels["severity"] == "critical"
