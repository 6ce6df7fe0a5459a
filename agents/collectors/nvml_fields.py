"""What NvmlCollector reads from each GPU: one reader per NVML query, with its fallbacks.

Each field is a name (the key under which "unsupported" is remembered per GPU) and a tuple of
readers tried in order: a reader that raises "not supported" (or finds its function missing
from an older pynvml) is never asked again on that GPU and the next one takes over. Readers
convert NVML units to the catalog's: mW -> W, KB/s -> bytes/s. The health and interconnect
readers (energy, NVLink, ECC, remapped rows, PCIe replays) are in nvml_signals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.collectors.nvml_signals import SIGNAL_FIELDS

Values = dict[str, int | float]
Reader = Callable[[Any, Any], Any]  # (nvml module, device handle) -> values


def memory_v2(nvml: Any, handle: Any) -> Values:
    # v2 reports driver-reserved memory apart, so "used" is what processes hold.
    info = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    return {"mem_used_bytes": int(info.used), "mem_total_bytes": int(info.total)}


def memory_v1(nvml: Any, handle: Any) -> Values:
    info = nvml.nvmlDeviceGetMemoryInfo(handle)
    return {"mem_used_bytes": int(info.used), "mem_total_bytes": int(info.total)}


def utilization(nvml: Any, handle: Any) -> Values:
    rates = nvml.nvmlDeviceGetUtilizationRates(handle)
    return {"util_pct": rates.gpu, "mem_util_pct": rates.memory}


def temperature_v(nvml: Any, handle: Any) -> Values:
    # nvmlDeviceGetTemperature is deprecated (to be removed in CUDA 14); prefer its successor.
    return {"temp_c": nvml.nvmlDeviceGetTemperatureV(handle, nvml.NVML_TEMPERATURE_GPU)}


def temperature(nvml: Any, handle: Any) -> Values:
    return {"temp_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)}


def power(nvml: Any, handle: Any) -> Values:
    return {"power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0}


def power_limit(nvml: Any, handle: Any) -> Values:
    return {"power_limit_w": nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0}


def sm_clock(nvml: Any, handle: Any) -> Values:
    return {"sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)}


def mem_clock(nvml: Any, handle: Any) -> Values:
    return {"mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)}


def pcie(nvml: Any, handle: Any) -> Values:
    # NVML samples each counter over ~20 ms and answers in KB/s (1 KB = 1024 bytes).
    tx = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
    rx = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
    return {"pcie_tx_bps": tx * 1024, "pcie_rx_bps": rx * 1024}


def clocks_event_reasons(nvml: Any, handle: Any) -> Values:
    return {"throttle_reasons": int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))}


def clocks_throttle_reasons(nvml: Any, handle: Any) -> Values:
    # The name before driver R535; kept for older drivers and pynvml releases.
    return {"throttle_reasons": int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))}


def ecc_uncorrected(nvml: Any, handle: Any) -> Values:
    count = nvml.nvmlDeviceGetTotalEccErrors(
        handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC
    )
    return {"ecc_dbe_total": int(count)}


def fan(nvml: Any, handle: Any) -> Values:
    return {"fan_pct": nvml.nvmlDeviceGetFanSpeed(handle)}


FIELDS: tuple[tuple[str, tuple[Reader, ...]], ...] = (
    ("memory", (memory_v2, memory_v1)),
    ("utilization", (utilization,)),
    ("temperature", (temperature_v, temperature)),
    ("power", (power,)),
    ("power_limit", (power_limit,)),
    ("sm_clock", (sm_clock,)),
    ("mem_clock", (mem_clock,)),
    ("pcie", (pcie,)),
    ("throttle_reasons", (clocks_event_reasons, clocks_throttle_reasons)),
    ("ecc", (ecc_uncorrected,)),
    ("fan", (fan,)),
    *SIGNAL_FIELDS,  # energy, NVLink, corrected ECC, remapped rows, PCIe replays
)
