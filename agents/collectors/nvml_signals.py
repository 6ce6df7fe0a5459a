"""GPU health and interconnect readers: energy, NVLink, corrected ECC, remapped rows, PCIe replays.

Same shape as nvml_fields (one reader per NVML query, fallbacks after it). Where a device or an
older pynvml lacks a query (a GPU without NVLink, a card without ECC, a driver before the field
existed) the reader raises "not supported" or finds its function or constant missing, and the
metric stays absent. NVLink throughput is a cumulative KiB counter: the readers hand it back
under a ``COUNTERS`` key and the collector turns two readings into bytes/s.
"""

from __future__ import annotations

from typing import Any

from agents.collectors.nvml_values import (
    ALL_LINKS,
    INVALID_ARGUMENT,
    NOT_SUPPORTED,
    field_values,
    need,
    sum_answered,
)

Values = dict[str, int | float]

# Raw cumulative counter key -> (catalog key of its per-second rate, bytes per counter unit).
COUNTERS: dict[str, tuple[str, int]] = {
    "nvlink_tx_kib": ("nvlink_tx_bps", 1024),
    "nvlink_rx_kib": ("nvlink_rx_bps", 1024),
}
# nvmlDeviceGetNvLinkErrorCounter's counters that count link errors (not ECC lane counters).
_LINK_ERRORS = ("NVML_NVLINK_ERROR_DL_CRC_FLIT", "NVML_NVLINK_ERROR_DL_CRC_DATA",
                "NVML_NVLINK_ERROR_DL_REPLAY", "NVML_NVLINK_ERROR_DL_RECOVERY")
# The same four as field values, each summed by NVML over the links.
_LINK_ERROR_FIELDS = ("NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                      "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                      "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
                      "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")


def energy(nvml: Any, handle: Any) -> Values:
    # Millijoules since the driver loaded (Volta and later).
    return {"energy_j": nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0}


def energy_field(nvml: Any, handle: Any) -> Values:
    field = nvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
    return {"energy_j": need(field_values(nvml, handle, [field]), field) / 1000.0}


def _no_links(nvml: Any, answers: dict) -> None:
    """A GPU that reports zero NVLink links has no NVLink metrics, not zeros."""
    count = answers.get(nvml.NVML_FI_DEV_NVLINK_LINK_COUNT)
    if count == 0:
        raise nvml.NVMLError(NOT_SUPPORTED)


def nvlink_throughput(nvml: Any, handle: Any) -> Values:
    tx = (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS)
    rx = (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS)
    answers = field_values(nvml, handle, [nvml.NVML_FI_DEV_NVLINK_LINK_COUNT, tx, rx])
    _no_links(nvml, answers)
    return {"nvlink_tx_kib": int(need(answers, tx)), "nvlink_rx_kib": int(need(answers, rx))}


def nvlink_errors_fields(nvml: Any, handle: Any) -> Values:
    fields = [getattr(nvml, name) for name in _LINK_ERROR_FIELDS]
    answers = field_values(nvml, handle, [nvml.NVML_FI_DEV_NVLINK_LINK_COUNT, *fields])
    _no_links(nvml, answers)
    return {"nvlink_errors_total": sum_answered(answers, fields)}


class NvLinkErrorCounters:
    """nvmlDeviceGetNvLinkErrorCounter summed over the GPU's links, which are found once per
    GPU (nvmlDeviceGetNvLinkState answers for each link the GPU has)."""

    def __init__(self) -> None:
        self._links: dict[int, tuple[Any, list[int]]] = {}  # id(handle) -> (handle, links)

    def __call__(self, nvml: Any, handle: Any) -> Values:
        counters = [getattr(nvml, name) for name in _LINK_ERRORS]
        total, answered = 0, False
        for link in self._links_of(nvml, handle):
            for counter in counters:
                try:
                    total += int(nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))
                    answered = True
                except nvml.NVMLError_NotSupported:  # e.g. a counter a newer GPU dropped
                    continue
        if not answered:
            raise nvml.NVMLError(NOT_SUPPORTED)
        return {"nvlink_errors_total": total}

    def _links_of(self, nvml: Any, handle: Any) -> list[int]:
        known = self._links.get(id(handle))
        if known is not None and known[0] is handle:
            return known[1]
        links = []
        for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
            try:
                nvml.nvmlDeviceGetNvLinkState(handle, link)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) == INVALID_ARGUMENT:
                    continue  # a link number this GPU does not have
                raise  # not supported (no NVLink at all), lost, ...
            links.append(link)
        self._links[id(handle)] = (handle, links)
        return links


def ecc_corrected(nvml: Any, handle: Any) -> Values:
    count = nvml.nvmlDeviceGetTotalEccErrors(
        handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC
    )
    return {"ecc_sbe_total": int(count)}


def remapped_rows(nvml: Any, handle: Any) -> Values:
    correctable, uncorrectable, pending, failed = nvml.nvmlDeviceGetRemappedRows(handle)
    return _rows(correctable, uncorrectable, pending, failed)


def remapped_rows_fields(nvml: Any, handle: Any) -> Values:
    fields = [nvml.NVML_FI_DEV_REMAPPED_COR, nvml.NVML_FI_DEV_REMAPPED_UNC,
              nvml.NVML_FI_DEV_REMAPPED_PENDING, nvml.NVML_FI_DEV_REMAPPED_FAILURE]
    answers = field_values(nvml, handle, fields)
    return _rows(*(need(answers, field) for field in fields))


def _rows(correctable: Any, uncorrectable: Any, pending: Any, failed: Any) -> Values:
    return {"remapped_rows_correctable": int(correctable),
            "remapped_rows_uncorrectable": int(uncorrectable),
            "remapped_rows_pending": 1 if pending else 0,
            "remapped_rows_failed": 1 if failed else 0}


def pcie_replays(nvml: Any, handle: Any) -> Values:
    return {"pcie_replays_total": int(nvml.nvmlDeviceGetPcieReplayCounter(handle))}


def pcie_replays_field(nvml: Any, handle: Any) -> Values:
    field = nvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER
    return {"pcie_replays_total": int(need(field_values(nvml, handle, [field]), field))}


SIGNAL_FIELDS = (
    ("energy", (energy, energy_field)),
    ("nvlink_throughput", (nvlink_throughput,)),
    ("nvlink_errors", (nvlink_errors_fields, NvLinkErrorCounters())),
    ("ecc_corrected", (ecc_corrected,)),
    ("remapped_rows", (remapped_rows, remapped_rows_fields)),
    ("pcie_replays", (pcie_replays, pcie_replays_field)),
)
