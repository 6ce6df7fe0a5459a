"""What each page charts: declared here once, rendered as data attributes, drawn by chart.js.

A chart is a list of lines; each line is one series API request (a metric for one entity, or
for every entity of its kind on a host, optionally a histogram quantile). The unit comes from
the metric catalog, so axes and read-outs never disagree with the API.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from agents.protocol import METRICS
from controlplane.fleet.models import Engine, Gpu, Host

QUANTILES = ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"))


@dataclass(frozen=True)
class Line:
    metric: str
    entity: str | None = None  # one entity, as the series API names it
    host: int | None = None  # or: every entity of the metric's kind on this host
    quantile: float | None = None
    label: str = ""  # legend label; empty: the entity's own name
    stat: str | None = None  # rollup statistic; None: the API's default (avg)

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric}")


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    lines: tuple[Line, ...]
    kind: str = "line"  # "line", "heatmap" (array metric) or "timeline" (bitmask)
    wide: bool = False  # the full width of the page (maps always are)

    @property
    def full_width(self) -> bool:
        return self.wide or self.kind != "line"

    @property
    def unit(self) -> str:
        return METRICS[self.lines[0].metric].unit

    @property
    def metrics(self) -> str:
        return " ".join(dict.fromkeys(line.metric for line in self.lines))

    def lines_json(self) -> str:
        return json.dumps([{k: v for k, v in asdict(line).items() if v not in (None, "")}
                           for line in self.lines])


def _one(entity: str, *pairs: tuple[str, str]) -> tuple[Line, ...]:
    return tuple(Line(metric, entity=entity, label=label) for metric, label in pairs)


def _quantiles(metric: str, entity: str) -> tuple[Line, ...]:
    return tuple(Line(metric, entity=entity, quantile=q, label=label) for q, label in QUANTILES)


def host_charts(host: Host, gpus: bool = True) -> dict[str, list[Chart]]:
    """By page section: "system", "gpus" (empty for a host without GPUs), "procs"."""
    h = str(host.id)
    every = host.id
    return {"system": [
        # Full width, above the per-core map, so both read against the same time axis.
        Chart("cpu", "CPU busy, all cores", _one(h, ("host.cpu_pct", "CPU")), wide=True),
        Chart("cpu-cores", "CPU busy per core", _one(h, ("host.cpu_core_pct", "")),
              kind="heatmap"),
        Chart("memory", "Memory", _one(h, ("host.mem_used_bytes", "used"),
                                       ("host.mem_total_bytes", "total"),
                                       ("host.swap_used_bytes", "swap"))),
        Chart("cpu-throttled", "cgroup CPU throttling",
              _one(h, ("host.cpu_throttled_pct", "throttled periods"))),
        Chart("load", "Load average (1 min)", _one(h, ("host.load1", "load1"))),
        Chart("network", "Network", _one(h, ("host.net_rx_bps", "rx"), ("host.net_tx_bps", "tx"))),
        Chart("disk", "Disk", _one(h, ("host.disk_read_bps", "read"),
                                   ("host.disk_write_bps", "write"))),
    ], "gpus": [] if not gpus else [
        Chart("gpu-util", "GPU utilisation", (Line("gpu.util_pct", host=every),)),
        Chart("gpu-mem", "GPU memory used", (Line("gpu.mem_used_bytes", host=every),)),
        Chart("gpu-temp", "GPU temperature", (Line("gpu.temp_c", host=every),)),
        Chart("gpu-power", "GPU power", (Line("gpu.power_w", host=every),)),
        Chart("gpu-sm-clock", "SM clock", (Line("gpu.sm_clock_mhz", host=every),)),
        Chart("gpu-mem-clock", "Memory clock", (Line("gpu.mem_clock_mhz", host=every),)),
    ], "procs": [
        Chart("proc-cpu", "vLLM processes: CPU (100 % = one core)",
              (Line("proc.cpu_pct", host=every),)),
        Chart("proc-rss", "vLLM processes: resident memory", (Line("proc.rss_bytes", host=every),)),
    ]}


def engine_charts(engine: Engine) -> list[Chart]:
    e = str(engine.id)
    return [
        Chart("requests", "Requests", _one(e, ("engine.requests_running", "running"),
                                           ("engine.requests_waiting", "waiting"))),
        Chart("kv-cache", "KV-cache usage", _one(e, ("engine.kv_cache_usage", "KV cache"))),
        Chart("prefix-cache", "Prefix-cache hit rate",
              _one(e, ("engine.prefix_cache_hit_rate", "hit rate"))),
        Chart("preemptions", "Preemptions", _one(e, ("engine.preemptions_per_s", "preemptions"))),
        Chart("tokens", "Tokens", _one(e, ("engine.prompt_tokens_per_s", "prompt"),
                                       ("engine.generation_tokens_per_s", "generation"))),
        Chart("finished", "Requests finished and rejected",
              _one(e, ("engine.requests_finished_per_s", "finished"),
                   ("engine.admission_rejections_per_s", "rejected"))),
        Chart("ttft", "Time to first token", _quantiles("engine.ttft_seconds", e)),
        Chart("itl", "Inter-token latency", _quantiles("engine.itl_seconds", e)),
        Chart("e2e", "End-to-end latency", _quantiles("engine.e2e_seconds", e)),
        Chart("queue", "Queue time", _quantiles("engine.queue_seconds", e)),
        *_engine_signal_charts(e),
    ]


def _engine_signal_charts(e: str) -> list[Chart]:
    """The vLLM signals beyond load and latency, a chart per group. Each stays empty ("No
    data") on an engine whose release or flags lack it (no speculative decoding, no LoRA)."""
    return [
        Chart("finished-reasons", "Requests finished, by reason",
              _one(e, *((f"engine.finished_{r}_per_s", r)
                        for r in ("stop", "length", "abort", "error")))),
        Chart("waiting-reasons", "Requests waiting, by reason",
              _one(e, ("engine.requests_waiting_capacity", "capacity"),
                   ("engine.requests_waiting_deferred", "deferred"))),
        Chart("iteration-tokens", "Tokens per engine step (batch size)",
              _quantiles("engine.iteration_tokens", e)),
        Chart("lengths", "Request lengths (p50, p90)", tuple(
            Line(metric, entity=e, quantile=q, label=f"{what} {label}")
            for metric, what in (("engine.prompt_length_tokens", "prompt"),
                                 ("engine.generation_length_tokens", "generation"))
            for q, label in QUANTILES[:2])),
        Chart("prefill-computed", "Prompt tokens computed at prefill (cache hits excluded)",
              _quantiles("engine.prefill_kv_computed_tokens", e)),
        Chart("spec-tokens", "Speculative decoding: draft tokens",
              _one(e, ("engine.spec_draft_tokens_per_s", "drafted"),
                   ("engine.spec_accepted_tokens_per_s", "accepted"))),
        Chart("spec-acceptance", "Speculative decoding: acceptance rate",
              _one(e, ("engine.spec_acceptance_rate", "accepted / drafted"))),
        Chart("lora", "LoRA adapters", _one(e, ("engine.lora_running", "running"),
                                            ("engine.lora_waiting", "waiting"))),
    ]


def gpu_charts(gpu: Gpu) -> list[Chart]:
    g = str(gpu.id)
    return [
        Chart("util", "Utilisation", _one(g, ("gpu.util_pct", "util"),
                                          ("gpu.mem_util_pct", "memory util"))),
        Chart("memory", "Memory", _one(g, ("gpu.mem_used_bytes", "used"),
                                       ("gpu.mem_total_bytes", "total"))),
        Chart("temp", "Temperature", _one(g, ("gpu.temp_c", "core"))),
        Chart("power", "Power", _one(g, ("gpu.power_w", "draw"), ("gpu.power_limit_w", "limit"))),
        Chart("clocks", "Clocks", _one(g, ("gpu.sm_clock_mhz", "SM"),
                                       ("gpu.mem_clock_mhz", "memory"))),
        Chart("pcie", "PCIe", _one(g, ("gpu.pcie_rx_bps", "rx"), ("gpu.pcie_tx_bps", "tx"))),
        Chart("fan", "Fan", _one(g, ("gpu.fan_pct", "fan"))),
        # A bitmask has no average: the last value of each bucket keeps real reason bits.
        Chart("throttle", "Throttle reasons",
              (Line("gpu.throttle_reasons", entity=g, stat="last"),), kind="timeline"),
        Chart("ecc", "Uncorrected ECC errors (since manufacture)",
              _one(g, ("gpu.ecc_dbe_total", "double-bit"))),
        Chart("xid", "Last XID error", (Line("gpu.xid_last", entity=g, label="XID", stat="max"),)),
        # A counter since the driver loaded: its slope is the energy drawn (kWh = J / 3.6e6).
        Chart("energy", "Energy since the driver loaded", _one(g, ("gpu.energy_j", "energy"))),
        Chart("nvlink", "NVLink", _one(g, ("gpu.nvlink_rx_bps", "rx"),
                                       ("gpu.nvlink_tx_bps", "tx"))),
        Chart("error-counters", "Corrected errors and replays (counters)",
              _one(g, ("gpu.ecc_sbe_total", "corrected ECC"),
                   ("gpu.nvlink_errors_total", "NVLink CRC/replay/recovery"),
                   ("gpu.pcie_replays_total", "PCIe replays"))),
        Chart("remapped-rows", "Remapped memory rows",
              _one(g, ("gpu.remapped_rows_correctable", "correctable"),
                   ("gpu.remapped_rows_uncorrectable", "uncorrectable"))),
        # Flags: the max of a bucket keeps a 1 that a shorter moment raised.
        Chart("health-flags", "Lost, remapping pending or failed (1 = yes)", tuple(
            Line(metric, entity=g, label=label, stat="max") for metric, label in (
                ("gpu.lost", "lost (NVML)"), ("gpu.remapped_rows_pending", "remap pending"),
                ("gpu.remapped_rows_failed", "remap failed")))),
    ]
