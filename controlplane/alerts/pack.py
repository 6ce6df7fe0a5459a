"""The default rule pack, written for vLLM hosts (docs/alerts.md says why each is shaped so).

Loaded after every migrate: missing pack rules are created, rules already there (perhaps
edited or disabled by an operator) are left alone unless ``refresh`` asks to reset them.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from agents import nvml_bits
from controlplane.alerts.models import AlertRule, Op, RuleKind, Severity
from controlplane.telemetry.objectives import objective_s


def pack() -> list[dict]:
    ttft_s = objective_s("ttft")
    offline_s = 2 * settings.PITWALL["ONLINE_WINDOW_S"]
    stall_s = settings.PITWALL["ENGINE_STALL_S"]
    return [
        dict(pack_key="agent-offline", name="Agent offline", kind=RuleKind.HOST_NO_DATA,
             severity=Severity.CRITICAL, window_s=offline_s, for_s=0,
             summary="{host}: the agent has not reported for {value:.0f} s"),
        dict(pack_key="engine-down", name="vLLM engine down", kind=RuleKind.ENGINE_DOWN,
             severity=Severity.CRITICAL, window_s=30, for_s=30,
             summary="{host} {engine}: /metrics does not answer (engine down or hung)"),
        dict(pack_key="engine-stalled", name="vLLM engine stalled", kind=RuleKind.ENGINE_STALLED,
             severity=Severity.CRITICAL, window_s=stall_s, op=Op.GT, threshold=0, for_s=0,
             keep_firing_for_s=30,
             summary="{host} {engine}: {value:.0f} requests held and no token generated nor "
                     "request finished for {window_s} s (engine wedged; /health still 200)"),
        dict(pack_key="kv-cache-full", name="KV cache full with requests waiting",
             kind=RuleKind.KV_PRESSURE, severity=Severity.WARNING, window_s=60, op=Op.GE,
             threshold=0.95, params={"waiting_above": 0}, for_s=120, keep_firing_for_s=60,
             summary="{host} {engine}: KV cache {value:.0%} full and requests are queueing"),
        dict(pack_key="preemptions", name="Sustained preemptions",
             metric="engine.preemptions_per_s", aggregation="avg", window_s=120, op=Op.GT,
             threshold=0.1, for_s=300,
             keep_firing_for_s=120, severity=Severity.WARNING,
             summary="{host} {engine}: {value:.2f} preemptions/s for 5 min (KV cache too small)"),
        dict(pack_key="waiting-queue", name="Requests queued for 5 minutes",
             metric="engine.requests_waiting", aggregation="min", window_s=120, op=Op.GT,
             threshold=0, for_s=300, keep_firing_for_s=60, severity=Severity.WARNING,
             summary="{host} {engine}: the waiting queue has not drained for 5 min "
                     "(at least {value:.0f} waiting)"),
        dict(pack_key="ttft-p99", name="TTFT p99 above objective", metric="engine.ttft_seconds",
             aggregation="quantile", quantile=0.99, window_s=300, op=Op.GT, threshold=ttft_s,
             for_s=300, keep_firing_for_s=120, severity=Severity.WARNING,
             summary="{host} {engine}: TTFT p99 {value:.2f} s over 5 min "
                     "(objective {threshold} s)"),
        *(dict(pack_key=f"{name}-budget-burn", name=f"{label} error budget burning fast",
               kind=RuleKind.ERROR_BUDGET_BURN, window_s=3600, op=Op.GT, threshold=14.4,
               params={"objective": name, "short_window_s": 300, "min_observations": 100},
               for_s=0,
               keep_firing_for_s=120, severity=Severity.CRITICAL,
               summary=f"{{host}} {{engine}}: {label} error budget burning {{value:.1f}}x "
                       f"over 1 h and 5 min (2 % of a 30-day budget an hour)")
          for name, label in (("ttft", "TTFT"), ("itl", "ITL"))),
        dict(pack_key="memory-beyond-share", name="GPU memory beyond the engine's share",
             kind=RuleKind.MEMORY_BEYOND_SHARE, window_s=120, op=Op.GT, threshold=0.05,
             for_s=180, severity=Severity.WARNING,
             summary="{host} GPU {gpu_index}: {value:.0%} of its memory is used beyond what "
                     "gpu_memory_utilization reserves (another process? OOM risk)"),
        dict(pack_key="gpu-thermal-throttle", name="GPU thermal or hardware slowdown",
             metric="gpu.throttle_reasons", aggregation="avg", bitmask=nvml_bits.SEVERE,
             window_s=120, op=Op.GE, threshold=0.5, for_s=120, keep_firing_for_s=120,
             severity=Severity.CRITICAL,
             summary="{host} GPU {gpu_index}: thermal/hardware slowdown in {value:.0%} of "
                     "samples"),
        dict(pack_key="gpu-power-cap", name="GPU held at its power cap",
             metric="gpu.throttle_reasons", aggregation="avg", bitmask=nvml_bits.SW_POWER_CAP,
             window_s=300, op=Op.GE, threshold=0.9, for_s=600, severity=Severity.INFO,
             summary="{host} GPU {gpu_index}: clocks capped by the power limit in {value:.0%} "
                     "of samples for 15 min"),
        dict(pack_key="gpu-ecc", name="GPU uncorrectable ECC errors", metric="gpu.ecc_dbe_total",
             aggregation="rate", window_s=600, op=Op.GT, threshold=0, for_s=0,
             keep_firing_for_s=600, severity=Severity.CRITICAL,
             summary="{host} GPU {gpu_index}: uncorrectable ECC errors are increasing"),
        dict(pack_key="gpu-lost", name="GPU lost", kind=RuleKind.GPU_LOST, window_s=60,
             params={"removed_within_s": 86400}, for_s=0, severity=Severity.CRITICAL,
             summary="{host} GPU {gpu_index} ({gpu}) is lost: gone from NVML or reported lost "
                     "(fell off the bus? XID 79)"),
        dict(pack_key="gpu-xid", name="GPU XID error", metric="gpu.xid_last", aggregation="max",
             window_s=300, op=Op.GT, threshold=0, for_s=0, keep_firing_for_s=300,
             severity=Severity.CRITICAL, summary="{host} GPU {gpu_index}: XID {value:.0f}"),
        dict(pack_key="host-cpu", name="Host CPU above 75% for 10 minutes", metric="host.cpu_pct",
             aggregation="avg", window_s=60, op=Op.GT, threshold=75, for_s=600,
             keep_firing_for_s=60, severity=Severity.WARNING,
             summary="{host}: CPU {value:.0f}% for 10 min"),
        dict(pack_key="cgroup-throttle", name="cgroup CPU throttling",
             metric="host.cpu_throttled_pct", aggregation="avg", window_s=120, op=Op.GT,
             threshold=10, for_s=300, keep_firing_for_s=60, severity=Severity.WARNING,
             summary="{host}: {value:.0f}% of cgroup CPU periods throttled (CPU quota too low)"),
        dict(pack_key="service-disrupted", name="Service disrupted",
             kind=RuleKind.SERVICE_DISRUPTED, severity=Severity.WARNING, window_s=600, for_s=0,
             keep_firing_for_s=0,
             summary="service {service}: {value:.0f} disruption(s) in {window_s} s: a rollout "
                     "rolled back, a replica replaced on another host, or a replica no host "
                     "could take (the service's events say which and why)"),
        dict(pack_key="cpu-bound-engine", name="vLLM process CPU-bound, GPUs waiting",
             kind=RuleKind.CPU_BOUND_ENGINE, window_s=120, op=Op.GE, threshold=95,
             params={"gpu_util_below": 85}, for_s=300, keep_firing_for_s=60,
             severity=Severity.WARNING,
             summary="{host} {engine}: a vLLM process at {value:.0f}% of a core while its GPUs "
                     "are under 85% busy (CPU bottleneck)"),
    ]


def load_default_pack(refresh: bool = False, using: str = "default") -> list[str]:
    """Create the pack's missing rules (all of them with ``refresh``); returns their names."""
    done = []
    with transaction.atomic(using=using):
        rules = AlertRule.objects.using(using)
        for spec in pack():
            rule = rules.filter(pack_key=spec["pack_key"]).first()
            if rule is not None and not refresh:
                continue
            if rule is None and rules.filter(name=spec["name"]).exists():
                continue  # an operator's rule took the name: theirs wins
            rule = rule or AlertRule(pack_key=spec["pack_key"])
            for key, value in spec.items():
                setattr(rule, key, value)
            rule.full_clean(exclude=["pack_key", "name"])
            rule.save(using=using)
            done.append(rule.name)
    return done
