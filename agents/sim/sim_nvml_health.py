"""The simulated GPUs' health and interconnect queries: energy, NVLink, ECC, remapped rows, PCIe
replays, and ``nvmlDeviceGetFieldValues`` for the same counters.

A mixin of ``SimNvml`` (agents/sim/gpus.py), with NVML's semantics: what the board lacks
(sim_nvml_caps) answers NVML_ERROR_NOT_SUPPORTED, a link number the GPU does not have
NVML_ERROR_INVALID_ARGUMENT; field values carry their own return code each, and the NVLink
throughput fields take a link as scope, or UINT_MAX for the sum over the links.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pynvml

from agents.sim.sim_nvml_caps import Caps
from agents.sim.sim_nvml_counters import Counters

ALL_LINKS = 0xFFFFFFFF
_ULL, _UINT = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
_LINK_ERROR_TOTALS = {
    pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
    pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
}


class _FieldError(Exception):
    """One field's NVML return code, inside a field-value read."""

    def __init__(self, code: int) -> None:
        self.code = code


class HealthApi:
    caps: Caps
    _index: Callable[[Any], int]
    _counters_of: Callable[[Any], Counters]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        counters = self._counters_of(handle)
        self._need(self.caps.energy)
        return int(counters.energy_mj)

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        self._link(handle, link)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int:
        errors = self._link(handle, link)
        if not 0 <= counter < len(errors):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return errors[counter]

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        c = self._counters_of(handle)
        self._need(self.caps.ecc)
        volatile = counter_type == pynvml.NVML_VOLATILE_ECC
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return c.sbe_volatile if volatile else c.sbe_aggregate
        return c.dbe_volatile if volatile else c.dbe_aggregate

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        counters = self._counters_of(handle)
        self._need(self.caps.row_remapping)
        return counters.remapped

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        return self._counters_of(handle).pcie_replays

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[Any]) -> list[Any]:
        counters = self._counters_of(handle)
        values = []
        for wanted in fieldIds:
            field, scope = wanted if isinstance(wanted, tuple) else (wanted, 0)
            value = pynvml.c_nvmlFieldValue_t(fieldId=field, scopeId=scope,
                                              timestamp=int(time.time() * 1e6))
            try:
                kind, number = self._field(counters, field, scope)
            except _FieldError as exc:
                value.nvmlReturn = exc.code
            else:
                value.valueType, value.nvmlReturn = kind, pynvml.NVML_SUCCESS
                setattr(value.value, "ullVal" if kind == _ULL else "uiVal", int(number))
            values.append(value)
        return values

    # -- plumbing -----------------------------------------------------------------------------

    @staticmethod
    def _need(supported: bool) -> None:
        if not supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _link(self, handle: Any, link: int) -> list[int]:
        counters = self._counters_of(handle)
        self._need(self.caps.nvlink)
        if not 0 <= link < self.caps.nvlink_links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return counters.link_errors[link]

    def _field(self, c: Counters, field: int, scope: int) -> tuple[int, float]:
        caps = self.caps
        if field == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION and caps.energy:
            return _ULL, c.energy_mj
        if field == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return _UINT, caps.nvlink_links
        if field in (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                     pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) and caps.nvlink:
            kib = c.nvlink_tx_kib if field == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX \
                else c.nvlink_rx_kib
            return _ULL, self._scoped(kib, scope)
        if field in _LINK_ERROR_TOTALS and caps.nvlink:
            return _ULL, sum(link[_LINK_ERROR_TOTALS[field]] for link in c.link_errors)
        remapped = (pynvml.NVML_FI_DEV_REMAPPED_COR, pynvml.NVML_FI_DEV_REMAPPED_UNC,
                    pynvml.NVML_FI_DEV_REMAPPED_PENDING, pynvml.NVML_FI_DEV_REMAPPED_FAILURE)
        if field in remapped and caps.row_remapping:
            return _UINT, c.remapped[remapped.index(field)]
        if field == pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER:
            return _UINT, c.pcie_replays
        if field == pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL and caps.ecc:
            return _ULL, c.sbe_aggregate
        if field == pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL and caps.ecc:
            return _ULL, c.dbe_aggregate
        raise _FieldError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _scoped(self, kib: float, scope: int) -> float:
        if scope == ALL_LINKS:
            return kib
        if not 0 <= scope < self.caps.nvlink_links:
            raise _FieldError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return kib / self.caps.nvlink_links  # the traffic spreads evenly over the links
