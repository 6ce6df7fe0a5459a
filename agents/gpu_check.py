"""``python -m agents.gpu_check`` (``make gpu-check``): the agent's NVML collector against this
machine's NVML, each gpu.* metric of the catalog with the value read or why there is none.

It needs the checkout and nvidia-ml-py only, so it runs on a bare GPU host or on a machine lent
for minutes. It reads nothing itself: it builds the agent's own ``NvmlCollector``, samples twice
``--interval`` apart (NVLink rates need two readings) and reports the second sample. A metric
the collector does not send is explained by what it recorded: the NVML answer of each reader
it dropped as unsupported (``NvmlCollector.dropped``), the warning of a read that failed, or a
metric that only some intervals carry. ``--simulated`` runs the same against agents.sim's NVML.

Exit status: 0 when NVML initialised and every GPU it lists was read; 1 when it lists none or
one was not read (lost, unreachable, skipped); 2 when NVML or pynvml cannot be loaded at all.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

from agents.collectors.nvml import NvmlCollector
from agents.collectors.nvml_fields import FIELDS
from agents.collectors.nvml_signals import COUNTERS
from agents.nvml_bits import decode
from agents.protocol import Metric, metrics_of

EXIT_OK, EXIT_UNREAD, EXIT_NO_NVML = 0, 1, 2
# The catalog keys each field of the collector (nvml_fields.FIELDS) sends, so that an absent
# metric finds the readers that failed; tests/agents/test_gpu_check.py holds it to the readers.
# gpu.lost and gpu.xid_last come from no field.
FIELD_KEYS: dict[str, tuple[str, ...]] = {
    "memory": ("mem_used_bytes", "mem_total_bytes"),
    "utilization": ("util_pct", "mem_util_pct"),
    "temperature": ("temp_c",),
    "power": ("power_w",),
    "power_limit": ("power_limit_w",),
    "sm_clock": ("sm_clock_mhz",),
    "mem_clock": ("mem_clock_mhz",),
    "pcie": ("pcie_tx_bps", "pcie_rx_bps"),
    "throttle_reasons": ("throttle_reasons",),
    "ecc": ("ecc_dbe_total",),
    "fan": ("fan_pct",),
    "energy": ("energy_j",),
    "nvlink_throughput": ("nvlink_tx_bps", "nvlink_rx_bps"),
    "nvlink_errors": ("nvlink_errors_total",),
    "ecc_corrected": ("ecc_sbe_total",),
    "remapped_rows": ("remapped_rows_correctable", "remapped_rows_uncorrectable",
                      "remapped_rows_pending", "remapped_rows_failed"),
    "pcie_replays": ("pcie_replays_total",),
}
_FIELD_OF = {key: name for name, keys in FIELD_KEYS.items() for key in keys}
_READERS = dict(FIELDS)
_RATES = {rate for rate, _scale in COUNTERS.values()}
# What an NVML answer means to whoever runs the check, by pynvml's name for its code.
_HINTS = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "libnvidia-ml.so.1 not found: no NVIDIA driver on this machine",
    "NVML_ERROR_DRIVER_NOT_LOADED": "the NVIDIA kernel driver is not loaded",
    "NVML_ERROR_NO_PERMISSION": "not permitted to this user",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "this driver lacks the function",
    "NVML_ERROR_GPU_IS_LOST": "the GPU fell off the bus",
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    nvml = _simulation(args) if args.simulated else _import_pynvml()
    if nvml is None:
        return EXIT_NO_NVML
    return check(nvml, interval=args.interval)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m agents.gpu_check", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between the two samples")
    p.add_argument("--simulated", action="store_true",
                   help="read agents.sim's simulated NVML instead of the driver's")
    p.add_argument("--sim-gpus", type=int, default=2, help="GPUs of the simulation")
    p.add_argument("--sim-model", default="NVIDIA H100 80GB HBM3",
                   help="board of the simulation, as NVML names it")
    return p


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        _fail(f"pynvml (nvidia-ml-py) is not installed in this Python ({sys.executable}); "
              "make gpu-check makes an environment with it")
        return None
    return pynvml


def _simulation(args: argparse.Namespace) -> Any:
    try:
        from agents.sim.gpus import SimNvml
    except ImportError as exc:
        _fail(f"--simulated needs agents/sim/ from a checkout and pynvml ({exc})")
        return None
    return SimNvml(count=args.sim_gpus, model=args.sim_model, seed=1)


def check(nvml: Any, interval: float = 1.0, sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.monotonic) -> int:
    """Print the report for the NVML module ``nvml``; the exit status."""
    warnings: list[str] = []
    collector = NvmlCollector(nvml, warn=warnings.append, clock=clock)
    try:
        if not collector.available:
            _fail(_init_failure(collector.init_error))
            return EXIT_NO_NVML
        collector.collect()  # primes the counters whose rates need a previous reading
        sleep(interval)
        samples = {sample["uuid"]: sample for sample in collector.collect()}
        listed = _call(nvml, "nvmlDeviceGetCount")
        _header(nvml, collector, interval, listed)
        unread = [gpu for gpu in collector.inventory()
                  if not _report_gpu(gpu, samples.get(gpu["uuid"]), collector, warnings)]
        for line in warnings:
            print(f"collector warning: {line}")
        return _verdict(collector, listed, unread)
    finally:
        collector.close()


def _header(nvml: Any, collector: NvmlCollector, interval: float, listed: Any) -> None:
    if collector.simulated:
        module = f"SIMULATED NVML ({type(nvml).__module__}.{type(nvml).__name__}): no GPU is read"
    else:
        module = f"pynvml from nvidia-ml-py {_package_version('nvidia-ml-py')}"
    cuda = _call(nvml, "nvmlSystemGetCudaDriverVersion")
    cuda = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else cuda
    print("Pitwall GPU check: the agent's NvmlCollector, two samples "
          f"{interval:g} s apart, the second shown")
    print(f"NVML module: {module}")
    print(f"driver {collector.driver_version() or 'unknown'}, "
          f"NVML {_text(_call(nvml, 'nvmlSystemGetNVMLVersion'))}, CUDA driver API {cuda}")
    gpus = _boards(collector)
    names = ", ".join(f"{g['index']}: {g['name']}" for g in gpus)
    print(f"NVML lists {listed} GPU(s); the collector found {len(gpus)}: {names or 'none'}")


def _report_gpu(gpu: dict[str, Any], sample: dict[str, Any] | None,
                collector: NvmlCollector, warnings: list[str]) -> bool:
    """Print one GPU's metrics; whether it was read."""
    mem = f"{gpu['mem_total_bytes'] / 2**30:.0f} GiB" if gpu["mem_total_bytes"] else "memory ?"
    mig = " MIG device" if _is_mig_device(gpu) else ""
    print(f"\nGPU {gpu['index']}{mig}  {gpu['name']}  {gpu['uuid']}  {gpu['pci_bus_id']}  {mem}")
    sent, unsupported, missing = 0, [], []
    for metric in metrics_of("gpu"):
        if sample is not None and metric.key in sample:
            sent += 1
            print(f"  {metric.name:<34} {_show(metric, sample[metric.key])}")
            continue
        reason, never = _absence(metric, gpu["uuid"], sample, collector, warnings)
        (unsupported if never else missing).append(metric.key)
        print(f"  {metric.name:<34} absent: {reason}")
    print(f"  sent {sent} of {len(metrics_of('gpu'))} gpu.* metrics; never on this device: "
          f"{', '.join(unsupported) or 'none'}; absent this time: {', '.join(missing) or 'none'}")
    return sample is not None and sample.get("lost") == 0


def _absence(metric: Metric, uuid: str, sample: dict[str, Any] | None,
             collector: NvmlCollector, warnings: list[str]) -> tuple[str, bool]:
    """Why the collector sent no ``metric`` for this GPU, and whether it never will."""
    if sample is None:
        return "the collector sent no sample for this GPU", False
    if metric.key == "lost":
        return "undecided: every read failed with NVML_ERROR_UNKNOWN (not yet a streak)", False
    if sample.get("lost"):
        return "the GPU is reported lost", False
    if metric.key == "xid_last":
        if collector.watches_xid:
            return "sent only in an interval with an XID event (watched; none came)", False
        return "XID events cannot be watched here (nvmlDeviceRegisterEvents refused)", True
    field = _FIELD_OF[metric.key]
    dropped = collector.dropped(uuid).get(field, [])
    if len(dropped) == len(_READERS[field]):
        return "; ".join(f"{_name(reader)}: {_nvml_text(exc)}" for reader, exc in dropped), True
    failed = [w for w in warnings if w.startswith(f"nvml {uuid} {field}: ")]
    if failed:
        return f"read failed: {failed[-1].split(': ', 1)[1]}", False
    if metric.key in _RATES:
        return "a rate: its counter gave no two readings that rise (first one, or a reset)", False
    return f"not sent, and the collector recorded no reason (field {field})", False


def _show(metric: Metric, value: Any) -> str:
    if metric.unit == "bytes":
        return f"{value} bytes ({value / 2**30:.2f} GiB)"
    if metric.unit == "bitmask":
        return f"{value:#x} ({', '.join(r.name for r in decode(value)) or 'no reason'})"
    number = f"{value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)
    return f"{number} {metric.unit}".rstrip()


def _verdict(collector: NvmlCollector, listed: Any, unread: list[dict[str, Any]]) -> int:
    gpus = _boards(collector)
    label = " (SIMULATED NVML)" if collector.simulated else ""
    if not gpus:
        _fail(f"NVML initialised but lists no GPU{label}")
        return EXIT_UNREAD
    problems = [f"GPU {g['index']} ({g['uuid']}) was not read" for g in unread]
    if isinstance(listed, int) and listed > len(gpus):
        problems.append(f"NVML lists {listed} GPUs, the collector found {len(gpus)}")
    if problems:
        _fail("; ".join(problems) + label)
        return EXIT_UNREAD
    print(f"\nresult: every GPU read ({len(gpus)}){label}")
    return EXIT_OK


def _is_mig_device(gpu: dict[str, Any]) -> bool:
    return bool((gpu["mig"] or {}).get("parent_uuid"))


def _boards(collector: NvmlCollector) -> list[dict[str, Any]]:
    """The physical GPUs of the collector's inventory (a MIG device is part of one)."""
    return [gpu for gpu in collector.inventory() if not _is_mig_device(gpu)]


def _init_failure(exc: BaseException | None) -> str:
    name = _error_name(exc)
    if name == "NVML_ERROR_LIBRARY_NOT_FOUND":
        return f"{_HINTS[name]} ({name})"
    return f"NVML did not initialise: {_nvml_text(exc) if exc else 'no reason given'}"


def _nvml_text(exc: BaseException) -> str:
    """An NVML answer as its code's name, NVML's words and what it means here."""
    if isinstance(exc, AttributeError):
        return f"missing from this pynvml ({exc})"
    name = _error_name(exc)
    hint = f": {_HINTS[name]}" if name in _HINTS else ""
    return f"{name or type(exc).__name__} ({exc}{hint})"


def _error_name(exc: BaseException | None) -> str | None:
    """pynvml's NVML_ERROR_* name for the code an NVMLError carries."""
    code = getattr(exc, "value", None)
    module = sys.modules.get(type(exc).__module__)
    return next((name for name, value in vars(module or object).items()
                 if name.startswith("NVML_ERROR_") and value == code), None)


def _call(nvml: Any, function: str) -> Any:
    """An optional NVML query for the header: its answer, or why there is none."""
    try:
        return getattr(nvml, function)()
    except AttributeError:
        return f"unknown ({function} not in this NVML module)"
    except nvml.NVMLError as exc:
        return f"unknown ({function}: {_nvml_text(exc)})"


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "(version unknown)"


def _name(reader: Any) -> str:
    return getattr(reader, "__name__", type(reader).__name__)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fail(message: str) -> None:
    print(f"gpu-check: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
