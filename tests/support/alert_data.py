"""A small fleet and synthetic samples around an explicit ``now``, written with plain INSERTs,
and rules evaluated at that ``now``: what the alerting tests (and the alert pages and API
tests) share.

Evaluation always runs with an explicit ``now`` (no sleeping) and only on the rules a test
names (the default pack is loaded in every test database too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import Alert, AlertRule
from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.telemetry.models import HistogramLayout
from tests.telemetry.rollup_data import insert_rows

T0 = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
STEP_S = 5
GIB = 2**30
GPU_TOTAL = 80 * GIB
TTFT_BOUNDS = [0.1, 0.5, 1.0, 2.5, 5.0, 10.0]


@dataclass
class Node:
    host: Host
    gpus: list[Gpu]
    engine: Engine


def make_node(hostname: str = "gpu-node-1", gpus: int = 2, utilization: str = "0.9",
              last_seen: datetime | None = T0) -> Node:
    host = Host.objects.create(hostname=hostname, last_seen=last_seen,
                               created_at=T0 - timedelta(days=1))
    made = [Gpu.objects.create(host=host, uuid=f"GPU-{hostname}-{i}", index=i,
                               mem_total_bytes=GPU_TOTAL) for i in range(gpus)]
    engine = Engine.objects.create(
        host=host, name="vllm:8000/0", gpu_uuids=[g.uuid for g in made],
        config={"gpu_memory_utilization": utilization} if utilization else {},
        last_seen=last_seen)
    return Node(host, made, engine)


Values = Callable[[datetime], dict]


def samples(entity: str, key: dict, values: Values, start: datetime,
            end: datetime = T0) -> None:
    """One row every 5 s in (start, end] with the key columns and ``values(ts)``."""
    rows, ts = [], start + timedelta(seconds=STEP_S)
    while ts <= end:
        row = values(ts)
        if row is not None:
            rows.append({**key, "ts": ts, **row})
        ts += timedelta(seconds=STEP_S)
    if rows:
        insert_rows(entity, rows)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def ttft_layout() -> int:
    return HistogramLayout.objects.get_or_create(bounds=TTFT_BOUNDS)[0].id


def rule(**fields) -> AlertRule:
    fields.setdefault("name", f"rule {AlertRule.objects.count() + 1}")
    made = AlertRule(**fields)
    made.full_clean()
    made.save()
    return made


def run(rule_: AlertRule, now: datetime) -> list[Alert]:
    """Evaluate one rule at ``now``; its alerts afterwards."""
    evaluate(now, rule_ids=[rule_.id])
    return list(Alert.objects.filter(rule=rule_).order_by("target"))


def firing(rule_: AlertRule, now: datetime) -> list[str]:
    return [a.target for a in run(rule_, now) if a.state == "firing"]
