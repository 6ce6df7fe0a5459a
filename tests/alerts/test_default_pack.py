"""Every rule of the default pack fires on its synthetic scenario and stays quiet on a healthy
vLLM host (which holds 90 % of each GPU's memory, as gpu_memory_utilization=0.9 reserves).

The scenarios run side by side: one fleet with a host for each (``pack_fleet``), evaluated
once every 30 s for 20 minutes after the onset with every pack rule, as the evaluator runs
them (committed rows, its lanes on connections of their own). Each test then reads what fired
on its own host: what it shows, and that nothing else did, neither there nor, for the healthy
host, from its neighbours' trouble. (One evaluation instead of one per scenario: a tenth of
the time.)"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.core.management import call_command

from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import Alert, AlertRule
from controlplane.alerts.pack import load_default_pack, pack
from controlplane.fleet.models import Gpu
from controlplane.telemetry.models import HistogramLayout
from tests.support.alert_data import GIB, GPU_TOTAL, T0, Node, make_node, samples, ttft_layout
from tests.support.samples import truncate_samples

# Half an hour of simulated telemetry for a fleet of scenarios, evaluated 40 times.
pytestmark = pytest.mark.slow(seconds=8)
S = timedelta(seconds=1)
START, END = T0 - 11 * 60 * S, T0 + 20 * 60 * S
ONSET = T0  # every scenario's trouble starts here
ITL_BOUNDS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5]


def itl_layout() -> int:
    return HistogramLayout.objects.get_or_create(bounds=ITL_BOUNDS)[0].id


def healthy(node: Node) -> dict[str, dict]:
    return {
        "host": {"cpu_pct": 35.0, "cpu_throttled_pct": 0.0},
        # vLLM's 90 % share plus half a GiB of CUDA context outside its budget
        "gpu": {"mem_used_bytes": int(0.9 * GPU_TOTAL) + GIB // 2, "mem_total_bytes": GPU_TOTAL,
                "util_pct": 96.0, "temp_c": 71.0, "throttle_reasons": 0x1,
                "ecc_dbe_total": 0},
        "engine": {"up": 1, "kv_cache_usage": 0.7, "requests_waiting": 0.0,
                   "requests_running": 24.0, "preemptions_per_s": 0.0,
                   "generation_tokens_per_s": 850.0, "requests_finished_per_s": 3.0,
                   "ttft_seconds_layout": ttft_layout(),
                   # bounds 0.1 0.5 1 2.5 5 10: all under 1 s
                   "ttft_seconds_counts": [5, 30, 10, 0, 0, 0, 0],
                   # bounds 10 25 50 100 250 500 ms: all under 50 ms (objective 100 ms)
                   "itl_seconds_layout": itl_layout(),
                   "itl_seconds_counts": [100, 300, 100, 0, 0, 0, 0]},
        "proc": {"engine_id": node.engine.id, "cpu_pct": 60.0},
    }


def write(node: Node, trouble: dict[str, dict] | None = None, silent: str | None = None,
          gpus: tuple[int, ...] = (0,), lost_at: datetime | None = None) -> None:
    """Healthy rows from START to END; from ONSET, ``trouble`` overrides values (a callable
    takes ts) on the entity, or ``silent`` entity sends nothing. ``lost_at``: GPU 1 leaves
    the host's inventory then (as ingest marks it) and sends nothing after."""
    base, trouble = healthy(node), trouble or {}
    if lost_at is not None:
        Gpu.objects.filter(id=node.gpus[1].id).update(present=False, removed_at=lost_at)

    def values(entity: str):
        def at(ts: datetime):
            if ts > ONSET and entity == silent:
                return None
            if lost_at is not None and ts > lost_at and getattr(at, "gpu_index", 0) == 1:
                return None
            row = dict(base[entity])
            if ts > ONSET and (entity != "gpu" or at.gpu_index in gpus):
                row.update({k: v(ts) if callable(v) else v
                            for k, v in trouble.get(entity, {}).items()})
            return row
        return at

    samples("host", {"host_id": node.host.id}, values("host"), START, END)
    samples("engine", {"engine_id": node.engine.id}, values("engine"), START, END)
    samples("proc", {"host_id": node.host.id, "pid": 4242}, values("proc"), START, END)
    for gpu in node.gpus:
        fn = values("gpu")
        fn.gpu_index = gpu.index
        samples("gpu", {"gpu_id": gpu.id}, fn, START, END)


@dataclass
class Fired:
    """What the pack did on one host of ``pack_fleet``."""

    first: dict[str, float]  # pack key -> seconds after ONSET it first fired there
    firing_at_end: Counter  # pack key -> its alerts still firing there after 20 minutes
    for_s: dict[str, int]  # pack key -> its rule's for_s

    def within(self, seconds: float) -> set[str]:
        return {key for key, t in self.first.items() if t <= seconds}


ALL = [spec["pack_key"] for spec in pack()]

SCENARIOS = {
    "engine-down": dict(trouble={"engine": {"up": 0}}),
    "kv-cache-full": dict(trouble={"engine": {"kv_cache_usage": 0.97, "requests_waiting": 6.0}}),
    "preemptions": dict(trouble={"engine": {"preemptions_per_s": 0.5}}),
    "waiting-queue": dict(trouble={"engine": {"requests_waiting": 3.0}}),
    "ttft-p99": dict(trouble={"engine": {"ttft_seconds_counts": [0, 10, 20, 10, 5, 5, 0]}}),
    "memory-beyond-share": dict(trouble={"gpu": {
        "mem_used_bytes": int(0.9 * GPU_TOTAL) + 10 * GIB}}),
    "gpu-thermal-throttle": dict(trouble={"gpu": {"throttle_reasons": 0x40}}),
    "gpu-power-cap": dict(trouble={"gpu": {"throttle_reasons": 0x4}}),
    "gpu-ecc": dict(trouble={"gpu": {"ecc_dbe_total": 2}}),
    "gpu-xid": dict(trouble={"gpu": {"xid_last": lambda ts: 79 if ts == ONSET + 5 * S else None}}),
    "host-cpu": dict(trouble={"host": {"cpu_pct": 88.0}}),
    "cgroup-throttle": dict(trouble={"host": {"cpu_throttled_pct": 35.0}}),
    "cpu-bound-engine": dict(trouble={"proc": {"cpu_pct": 99.5}, "gpu": {"util_pct": 55.0}},
                             gpus=(0, 1)),
    # 24 requests running, and the counters of tokens and finished requests stand still
    "engine-stalled": dict(trouble={"engine": {"generation_tokens_per_s": 0.0,
                                               "requests_finished_per_s": 0.0}}),
    # every request slower than the 2-s objective: the budget burns 100x
    "ttft-budget-burn": dict(trouble={"engine": {"ttft_seconds_counts": [0, 0, 0, 0, 20, 30,
                                                                         0]}}),
    # every token later than the 100-ms objective
    "itl-budget-burn": dict(trouble={"engine": {"itl_seconds_counts": [0, 0, 0, 0, 100, 300,
                                                                       100]}}),
    "gpu-lost": dict(lost_at=ONSET),
}

# A full KV cache with a queue that never drains is also a sustained waiting queue. A TTFT p99
# above the objective burns the TTFT error budget (here 27x), and a fast burn of it is a p99
# above the objective.
ALSO = {"kv-cache-full": {"waiting-queue"}, "ttft-p99": {"ttft-budget-burn"},
        "ttft-budget-burn": {"ttft-p99"}}

# The hosts of pack_fleet besides one per scenario: (how the node is made, what it writes).
# Every host but the silent one keeps reporting throughout (ingest refreshes its last_seen).
OTHERS = {
    "healthy": (dict(), dict()),
    "engine-silent": (dict(), dict(silent="engine")),
    "silent-host": (dict(last_seen=ONSET), dict(silent="engine")),
    "kv-full-no-queue": (dict(), dict(trouble={"engine": {"kv_cache_usage": 0.99}})),
    "pinned-busy-gpus": (dict(), dict(trouble={"proc": {"cpu_pct": 100.0}})),
    "default-share": (dict(utilization=""), dict()),
    "half-share": (dict(utilization="0.5"), dict()),
    "idle-engine": (dict(), dict(trouble={"engine": {
        "requests_running": 0.0, "requests_waiting": 0.0, "generation_tokens_per_s": 0.0,
        "requests_finished_per_s": 0.0}})),
    # /metrics no longer answers (up 0) but its last gauges still say 24 running, no progress
    "down-stale-gauges": (dict(), dict(trouble={"engine": {
        "up": 0, "generation_tokens_per_s": 0.0, "requests_finished_per_s": 0.0}})),
    # the agent's last inventory lacked GPU 1, then the host went silent (decommissioned)
    "gpu-gone-host-silent": (dict(last_seen=ONSET - 120 * S),
                             dict(lost_at=ONSET - 125 * S)),
}


@pytest.fixture(scope="module")
def pack_fleet(django_db_setup, django_db_blocker) -> Iterator[dict[str, Fired]]:
    """A host per scenario and per case of OTHERS, every pack rule evaluated over all of them
    at once; what fired, by scenario. The rows are committed (the evaluator's lanes read them
    on connections of their own) and flushed afterwards, as a transactional test's are."""
    with django_db_blocker.unblock():
        try:
            hosts: dict[str, int] = {}
            for key, scenario in SCENARIOS.items():
                node = make_node(f"vllm-{key}", last_seen=END)
                write(node, **scenario)
                hosts[key] = node.host.id
            for key, (made, written) in OTHERS.items():
                node = make_node(f"vllm-{key}", **{"last_seen": END, **made})
                write(node, **written)
                hosts[key] = node.host.id
            rules = {r.id: r.pack_key for r in AlertRule.objects.filter(pack_key__in=ALL)}
            first: dict[int, dict[str, float]] = defaultdict(dict)
            for t in range(0, 1200 + 1, 30):
                evaluate(ONSET + t * S, rule_ids=list(rules))
                for alert in Alert.objects.filter(rule_id__in=rules, state="firing"):
                    first[alert.host_id].setdefault(rules[alert.rule_id], t)
            at_end: dict[int, Counter] = defaultdict(Counter)
            for alert in Alert.objects.filter(rule_id__in=rules, state="firing"):
                at_end[alert.host_id][rules[alert.rule_id]] += 1
            for_s = dict(AlertRule.objects.filter(pack_key__in=ALL)
                         .values_list("pack_key", "for_s"))
            yield {key: Fired(first[host], at_end[host], for_s) for key, host in hosts.items()}
        finally:
            truncate_samples()
            call_command("flush", verbosity=0, interactive=False, reset_sequences=False)


def test_the_pack_is_loaded_enabled_by_migrate(db):
    rules = AlertRule.objects.filter(pack_key__in=ALL)
    assert sorted(rules.values_list("pack_key", flat=True)) == sorted(ALL)
    assert all(rules.values_list("enabled", flat=True))


def test_loading_the_pack_again_keeps_an_operators_edits(db):
    AlertRule.objects.filter(pack_key="host-cpu").update(threshold=90, enabled=False)
    assert load_default_pack() == []
    assert AlertRule.objects.get(pack_key="host-cpu").threshold == 90
    assert "Host CPU above 75% for 10 minutes" in load_default_pack(refresh=True)
    assert AlertRule.objects.get(pack_key="host-cpu").threshold == 75


def test_a_healthy_vllm_host_holding_90_percent_of_gpu_memory_fires_nothing(pack_fleet):
    assert pack_fleet["healthy"].first == {}


@pytest.mark.parametrize("pack_key", sorted(SCENARIOS))
def test_each_pack_rule_fires_on_its_scenario_and_only_it(pack_fleet, pack_key):
    fired = pack_fleet[pack_key].first
    assert pack_key in fired
    # not before its `for` has passed (rules with for 0 fire on the first cycle that sees it)
    assert fired[pack_key] >= pack_fleet[pack_key].for_s[pack_key]
    # everything else stays quiet, but for what the same trouble rightly shows too
    assert set(fired) - ALSO.get(pack_key, set()) == {pack_key}


def test_the_agent_offline_rule_fires_when_the_host_stops_reporting(empty_samples):
    node = make_node("gone-1", last_seen=T0 - 90 * S)
    make_node("here-1", last_seen=T0)
    evaluate(T0, rule_ids=[AlertRule.objects.get(pack_key="agent-offline").id])
    fired = [a.labels["host"] for a in Alert.objects.filter(state="firing")]
    assert fired == [node.host.hostname]


def test_an_engine_that_goes_silent_while_its_host_reports_is_down(pack_fleet):
    assert pack_fleet["engine-silent"].within(300) == {"engine-down"}


def test_an_engine_on_a_silent_host_is_left_to_the_agent_offline_rule(pack_fleet):
    assert "engine-down" not in pack_fleet["silent-host"].within(300)


def test_a_full_kv_cache_with_no_queue_is_healthy(pack_fleet):
    assert "kv-cache-full" not in pack_fleet["kv-full-no-queue"].first


def test_a_pinned_process_whose_gpus_are_busy_is_not_cpu_bound(pack_fleet):
    assert "cpu-bound-engine" not in pack_fleet["pinned-busy-gpus"].first


def test_memory_beyond_share_uses_vllms_default_share_when_the_config_does_not_say(pack_fleet):
    assert "memory-beyond-share" not in pack_fleet["default-share"].first


def test_memory_beyond_share_follows_the_engines_configured_share(pack_fleet):
    # An engine started with 0.5 leaves half the GPU: 90 % used means something else is there.
    fired = pack_fleet["half-share"]
    assert "memory-beyond-share" in fired.first
    assert fired.firing_at_end["memory-beyond-share"] == 2  # both GPUs


def test_an_idle_engine_is_not_stalled(pack_fleet):
    assert pack_fleet["idle-engine"].first == {}


def test_an_engine_that_stops_answering_is_down_not_stalled(pack_fleet):
    assert set(pack_fleet["down-stale-gauges"].first) == {"engine-down"}


def test_the_lost_gpu_alone_is_lost(pack_fleet):
    assert pack_fleet["gpu-lost"].firing_at_end["gpu-lost"] == 1


def test_a_gpu_gone_from_a_silent_host_is_left_to_the_agent_offline_rule(pack_fleet):
    assert set(pack_fleet["gpu-gone-host-silent"].first) == {"agent-offline"}
