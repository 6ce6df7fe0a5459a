"""Wire protocols v1 and v2 and the metric catalog: the one list every reader uses.

Plain Python, no Django: the agent builds batches from this module and the control plane
imports it (never the other way round). Adding a metric is one entry in ``CATALOG``.

A batch (agent -> ``POST /api/v1/ingest``)::

    {"protocol": 1,
     "agent": {"version", "boot_id", "seq", "spool"?},
     "host": {inventory}?,                      # required in the first batch of a boot
     "samples": [{"ts", "host": {...}, "gpus": [...], "engines": [...], "processes": [...]}]}

Keys inside the sample entities are catalog names without the entity prefix. Counters travel
as per-interval rates, histograms as per-interval bucket deltas; a metric a device does not
support is absent, never 0.

Protocol v2 carries the same batch column by column (``to_columns``; docs/protocol.md): the
server decodes and checks it in C, a column at a time. Agents build v1 samples and turn each
batch into v2 once, as the sender takes it: v2 is what they queue, spool and send. v1 is
deprecated: an agent writes it only for a server that does not announce v2
(``PROTOCOLS_HEADER``), converting back with ``from_columns``; the server still decodes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

PROTOCOL_VERSION = 1
COLUMNS_VERSION = 2
# Where agents post their batches: the server routes this path around Django (asgi.py).
INGEST_PATH = "/api/v1/ingest"
# A reply header listing the protocol versions the server accepts ("1, 2"); absent: v1 only.
PROTOCOLS_HEADER = "Pitwall-Protocols"

Entity = Literal["host", "gpu", "engine", "proc"]
Kind = Literal["gauge", "rate", "histogram"]

# Wire key of each entity list inside a sample, and the key naming the entity in each item.
SAMPLE_SECTIONS: dict[Entity, tuple[str, str | None]] = {
    "host": ("host", None),
    "gpu": ("gpus", "uuid"),
    "engine": ("engines", "name"),
    "proc": ("processes", "pid"),
}


@dataclass(frozen=True)
class Metric:
    name: str  # dotted, stable, public: "gpu.util_pct"
    unit: str  # "%", "bytes", "bytes/s", "W", "MHz", "°C", "ratio", "1/s", "s", "count", ...
    kind: Kind
    description: str
    low: float | None = None  # smallest valid value, None = unbounded
    high: float | None = None  # largest valid value
    integer: bool = False  # must be an integer on the wire (bytes, counts, bitmasks)
    array: bool = False  # a list of numbers (one per CPU core, ...)

    @property
    def entity(self) -> Entity:
        return self.name.split(".", 1)[0]  # type: ignore[return-value]

    @property
    def key(self) -> str:
        """The name as it appears on the wire, inside its entity."""
        return self.name.split(".", 1)[1]


def _pct(name: str, description: str, high: float | None = 100.0) -> Metric:
    return Metric(name, "%", "gauge", description, low=0.0, high=high)


def _bytes(name: str, description: str) -> Metric:
    return Metric(name, "bytes", "gauge", description, low=0, integer=True)


def _rate(name: str, unit: str, description: str) -> Metric:
    return Metric(name, unit, "rate", description, low=0.0)


def _histogram(name: str, description: str, unit: str = "s") -> Metric:
    return Metric(name, unit, "histogram", description)


CATALOG: tuple[Metric, ...] = (
    # host
    _pct("host.cpu_pct", "CPU busy time over the interval, all cores (100 = every core busy)"),
    Metric("host.cpu_core_pct", "%", "gauge", "CPU busy time per core over the interval",
           low=0.0, high=100.0, array=True),
    Metric("host.load1", "", "gauge", "1-minute load average", low=0.0),
    _bytes("host.mem_used_bytes", "Memory in use (total minus available)"),
    _bytes("host.mem_total_bytes", "Physical memory"),
    _bytes("host.swap_used_bytes", "Swap in use"),
    _pct("host.cpu_throttled_pct",
         "Share of cgroup v2 CPU periods in the interval that were throttled (cpu.stat)"),
    _rate("host.net_rx_bps", "bytes/s", "Bytes received per second, all interfaces but loopback"),
    _rate("host.net_tx_bps", "bytes/s", "Bytes sent per second, all interfaces but loopback"),
    _rate("host.disk_read_bps", "bytes/s", "Bytes read from block devices per second"),
    _rate("host.disk_write_bps", "bytes/s", "Bytes written to block devices per second"),
    # gpu (NVML semantics)
    _bytes("gpu.mem_used_bytes", "Framebuffer memory in use (NVML memory info v2 where available)"),
    _bytes("gpu.mem_total_bytes", "Framebuffer memory"),
    _pct("gpu.util_pct", "Share of the sample period a kernel was running (NVML utilization.gpu)"),
    _pct("gpu.mem_util_pct",
         "Share of the sample period device memory was read or written (NVML utilization.memory)"),
    Metric("gpu.temp_c", "°C", "gauge", "GPU core temperature", low=-50.0, high=200.0),
    Metric("gpu.power_w", "W", "gauge", "Power draw", low=0.0),
    Metric("gpu.power_limit_w", "W", "gauge", "Enforced power limit", low=0.0),
    Metric("gpu.sm_clock_mhz", "MHz", "gauge", "SM clock", low=0.0),
    Metric("gpu.mem_clock_mhz", "MHz", "gauge", "Memory clock", low=0.0),
    _rate("gpu.pcie_tx_bps", "bytes/s", "PCIe transmit throughput"),
    _rate("gpu.pcie_rx_bps", "bytes/s", "PCIe receive throughput"),
    Metric("gpu.throttle_reasons", "bitmask", "gauge",
           "NVML clocks event (throttle) reasons bitmask", low=0, integer=True),
    Metric("gpu.ecc_dbe_total", "count", "gauge",
           "Uncorrected (double-bit) ECC errors, aggregate since manufacture", low=0, integer=True),
    Metric("gpu.xid_last", "code", "gauge", "Most recent XID error code seen in the interval",
           low=0, integer=True),
    _pct("gpu.fan_pct", "Fan speed as a share of its maximum"),
    # Cumulative counters below travel as they are (gauges of a count): rules take their rate.
    Metric("gpu.energy_j", "J", "gauge",
           "Energy used since the driver loaded (NVML total energy consumption, Volta+)", low=0.0),
    _rate("gpu.nvlink_tx_bps", "bytes/s", "NVLink data transmitted per second, all links"),
    _rate("gpu.nvlink_rx_bps", "bytes/s", "NVLink data received per second, all links"),
    Metric("gpu.nvlink_errors_total", "count", "gauge",
           "NVLink CRC (flit and data), replay and recovery errors, all links", low=0,
           integer=True),
    Metric("gpu.ecc_sbe_total", "count", "gauge",
           "Corrected (single-bit) ECC errors, aggregate since manufacture", low=0, integer=True),
    Metric("gpu.remapped_rows_correctable", "count", "gauge",
           "Memory rows remapped for correctable errors", low=0, integer=True),
    Metric("gpu.remapped_rows_uncorrectable", "count", "gauge",
           "Memory rows remapped for uncorrectable errors", low=0, integer=True),
    Metric("gpu.remapped_rows_pending", "bool", "gauge",
           "1 when a row remapping waits for a GPU reset", low=0, high=1, integer=True),
    Metric("gpu.remapped_rows_failed", "bool", "gauge",
           "1 when a row remapping failed (the GPU needs service)", low=0, high=1, integer=True),
    Metric("gpu.pcie_replays_total", "count", "gauge", "PCIe replays since the driver loaded",
           low=0, integer=True),
    Metric("gpu.lost", "bool", "gauge",
           "1 when NVML reports the GPU lost or unreachable (fallen off the bus)", low=0, high=1,
           integer=True),
    # engine (vLLM)
    Metric("engine.up", "bool", "gauge", "1 when the engine's /metrics answered", low=0, high=1,
           integer=True),
    Metric("engine.requests_running", "count", "gauge", "Requests in model execution batches",
           low=0),
    Metric("engine.requests_waiting", "count", "gauge", "Requests waiting to be scheduled", low=0),
    Metric("engine.kv_cache_usage", "ratio", "gauge", "KV-cache usage, 0-1", low=0.0, high=1.0),
    Metric("engine.prefix_cache_hit_rate", "ratio", "gauge",
           "Prefix-cache hits / queries over the interval, 0-1", low=0.0, high=1.0),
    _rate("engine.preemptions_per_s", "1/s", "Preemptions per second"),
    _rate("engine.prompt_tokens_per_s", "tokens/s", "Prefill tokens processed per second"),
    _rate("engine.generation_tokens_per_s", "tokens/s", "Generation tokens per second"),
    _rate("engine.requests_finished_per_s", "1/s", "Requests finished per second"),
    _rate("engine.admission_rejections_per_s", "1/s",
          "Admission attempts rejected by a queue limit per second"),
    _histogram("engine.ttft_seconds", "Time to first token"),
    _histogram("engine.itl_seconds", "Inter-token latency"),
    _histogram("engine.e2e_seconds", "End-to-end request latency"),
    _histogram("engine.queue_seconds", "Time spent waiting in the queue"),
    # With queue_seconds, where a request's time to first token went: waiting to be scheduled,
    # then prefilling its prompt (the diagnoses tell queueing from prefill by the two).
    _histogram("engine.prefill_seconds", "Time spent prefilling the prompt, from the first "
               "step that scheduled it to its first token"),
    # engine: what vLLM reports beyond load and latency; each absent where the release or its
    # flags lack it (no speculative decoding, no LoRA, an older vLLM)
    Metric("engine.requests_waiting_capacity", "count", "gauge",
           "Requests waiting for scheduling capacity (vLLM 0.20+)", low=0),
    Metric("engine.requests_waiting_deferred", "count", "gauge",
           "Requests waiting, deferred by a transient constraint: LoRA budget, KV transfer, "
           "blocked (vLLM 0.20+)", low=0),
    _rate("engine.finished_stop_per_s", "1/s",
          "Requests finished by a stop condition (EOS token, stop string) per second"),
    _rate("engine.finished_length_per_s", "1/s",
          "Requests finished at max_tokens or the model's length limit per second"),
    _rate("engine.finished_abort_per_s", "1/s",
          "Requests aborted (client gone, cancelled) per second"),
    _rate("engine.finished_error_per_s", "1/s",
          "Requests ended by an error per second (recent vLLM releases)"),
    _rate("engine.spec_draft_tokens_per_s", "tokens/s",
          "Speculative decoding: draft tokens proposed per second"),
    _rate("engine.spec_accepted_tokens_per_s", "tokens/s",
          "Speculative decoding: draft tokens accepted per second"),
    Metric("engine.spec_acceptance_rate", "ratio", "gauge",
           "Speculative decoding: accepted / draft tokens over the interval, 0-1", low=0.0,
           high=1.0),
    Metric("engine.lora_running", "count", "gauge", "LoRA adapters with running requests",
           low=0, integer=True),
    Metric("engine.lora_waiting", "count", "gauge", "LoRA adapters with waiting requests",
           low=0, integer=True),
    _histogram("engine.iteration_tokens", "Tokens per engine step (prefill + decode): the "
               "batch size", "tokens"),
    _histogram("engine.prompt_length_tokens", "Prompt length of finished requests", "tokens"),
    _histogram("engine.generation_length_tokens", "Generated length of finished requests",
               "tokens"),
    _histogram("engine.prefill_kv_computed_tokens", "Prompt tokens a finished request computed "
               "at prefill, prefix-cache hits excluded (vLLM 0.13+)", "tokens"),
    # process (the vLLM processes)
    Metric("proc.cpu_pct", "%", "gauge", "Process CPU time over the interval (100 = one core)",
           low=0.0),
    Metric("proc.cpu_wait_pct", "%", "gauge",
           "Time the process's threads were runnable but waited for a CPU, over the interval "
           "(100 = one thread waiting all the time; Linux schedstat run delay)", low=0.0),
    _bytes("proc.rss_bytes", "Resident set size"),
    _bytes("proc.gpu_mem_bytes", "GPU memory used by the process, all its GPUs"),
    Metric("proc.threads", "count", "gauge", "Threads", low=0, integer=True),
)

METRICS: dict[str, Metric] = {m.name: m for m in CATALOG}

# Process attributes that travel beside the proc.* metrics; they are not time series.
PROCESS_ATTRIBUTES = ("cpu_affinity", "numa_nodes")


def metrics_of(entity: Entity) -> tuple[Metric, ...]:
    return tuple(m for m in CATALOG if m.entity == entity)


def wire_keys(entity: Entity) -> dict[str, Metric]:
    return {m.key: m for m in metrics_of(entity)}


# v2 section of each v1 sample list, and the key naming the entity of a row.
COLUMN_SECTIONS = (("hosts", "host", None), ("gpus", "gpus", "uuid"),
                   ("engines", "engines", "name"), ("processes", "processes", "pid"))


def to_columns(batch: dict[str, Any]) -> dict[str, Any]:
    """A v1 batch as protocol v2: ``ts`` once per sample, then per section one list per key.

    ``at`` (each row's sample index) is only written when the batch holds several samples;
    a key a row lacks is null in that row, and a key no row has is left out.
    """
    samples = batch.get("samples", [])
    out: dict[str, Any] = {"protocol": COLUMNS_VERSION, "agent": batch["agent"]}
    if "host" in batch:
        out["host"] = batch["host"]
    out["ts"] = [sample["ts"] for sample in samples]
    several = len(samples) > 1
    for section, key, _id in COLUMN_SECTIONS:
        rows: list[tuple[int, dict[str, Any]]] = []
        for i, sample in enumerate(samples):
            value = sample.get(key)
            if key == "host":
                if value:
                    rows.append((i, value))
            else:
                rows.extend((i, item) for item in value or ())
        if rows:
            out[section] = _columns(rows, several or key == "host" and len(rows) != len(samples))
    return out


def _columns(rows: list[tuple[int, dict[str, Any]]], with_at: bool) -> dict[str, Any]:
    keys = dict.fromkeys(k for _, row in rows for k in row)
    columns: dict[str, Any] = {"at": [i for i, _ in rows]} if with_at else {}
    for key in keys:
        columns[key] = [row.get(key) for _, row in rows]
    return columns


def is_columns(batch: dict[str, Any]) -> bool:
    return batch.get("protocol") == COLUMNS_VERSION


def as_columns(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch in protocol v2, converted once if it is a v1 batch."""
    return batch if is_columns(batch) else to_columns(batch)


def sample_count(batch: dict[str, Any]) -> int:
    return len(batch.get("ts", ())) if is_columns(batch) else len(batch.get("samples", ()))


def from_columns(batch: dict[str, Any]) -> dict[str, Any]:
    """A v2 batch back as protocol v1, for a server that predates v2 (deprecated).

    The inverse of ``to_columns``: a null cell is a key the row lacks, rows go to the sample
    ``at`` names (host rows without ``at`` are the samples in order; other rows without it
    belong to the only sample).
    """
    if not is_columns(batch):
        return batch
    samples: list[dict[str, Any]] = [{"ts": ts} for ts in batch.get("ts", ())]
    for section, key, _id in COLUMN_SECTIONS:
        columns = batch.get(section)
        if not columns:
            continue
        names = [name for name in columns if name != "at"]
        count = len(columns[names[0]]) if names else len(columns.get("at") or ())
        at = columns.get("at") or (range(count) if key == "host" else [0] * count)
        for row, index in enumerate(at):
            values = {name: columns[name][row] for name in names
                      if columns[name][row] is not None}
            if key == "host":
                samples[index]["host"] = values
            else:
                samples[index].setdefault(key, []).append(values)
    out: dict[str, Any] = {"protocol": PROTOCOL_VERSION, "agent": batch["agent"]}
    if "host" in batch:
        out["host"] = batch["host"]
    out["samples"] = samples
    return out
