"""A hand-built NVML module for the collector tests: NVML's answers written by hand in the shapes
pynvml returns them (tuples, ``c_nvmlFieldValue_t`` arrays with a return code per field), for
boards and pynvml releases that lack a query. Not recorded on hardware: no GPU here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pynvml

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
UINT = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT


@dataclass
class Board:
    """What one GPU answers; a function named in ``fail`` raises that NVML error code, a field
    id in ``field_fail`` answers that code in its own nvmlReturn."""

    uuid: str = "GPU-h100"
    energy_mj: int = 1_234_567_890
    links: int = 18
    tx_kib: int = 9_000_000_000
    rx_kib: int = 8_500_000_000
    link_errors: dict[int, int] = field(default_factory=lambda: {  # counter type -> per link
        pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: 1, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: 0,
        pynvml.NVML_NVLINK_ERROR_DL_REPLAY: 2, pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: 0,
        pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA: 50})
    sbe: int = 7
    dbe: int = 0
    remapped: tuple[int, int, int, int] = (2, 1, 1, 0)
    pcie_replays: int = 3
    fail: dict[str, int] = field(default_factory=dict)
    field_fail: dict[int, int] = field(default_factory=dict)


class HandBuiltNvml:
    """The pynvml functions the collector calls; ``missing`` names functions (or constants)
    this pynvml release lacks."""

    def __init__(self, boards: list[Board], missing: tuple[str, ...] = ()) -> None:
        self.boards, self.missing = boards, set(missing)
        self.calls: Counter = Counter()

    def __getattr__(self, name: str) -> Any:
        # Constants and error classes are pynvml's, unless this release "lacks" them; functions
        # not written here are missing, as from an older pynvml.
        if name in self.__dict__.get("missing", ()) or name.startswith("nvml"):
            raise AttributeError(name)
        return getattr(pynvml, name)

    def __getattribute__(self, name: str) -> Any:
        if name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def _board(self, function: str, board: Board) -> Board:
        self.calls[function] += 1
        if function in board.fail:
            raise pynvml.NVMLError(board.fail[function])
        return board

    # discovery and the older signals: enough for a sample
    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return len(self.boards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Board:
        return self.boards[index]

    def nvmlDeviceGetUUID(self, board: Board) -> str:
        return self._board("nvmlDeviceGetUUID", board).uuid

    def nvmlDeviceGetName(self, board: Board) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetPowerUsage(self, board: Board) -> int:
        self._board("nvmlDeviceGetPowerUsage", board)
        return 400_000

    # the new signals
    def nvmlDeviceGetTotalEnergyConsumption(self, board: Board) -> int:
        return self._board("nvmlDeviceGetTotalEnergyConsumption", board).energy_mj

    def nvmlDeviceGetTotalEccErrors(self, board: Board, error_type: int, counter: int) -> int:
        b = self._board("nvmlDeviceGetTotalEccErrors", board)
        assert counter == pynvml.NVML_AGGREGATE_ECC
        return b.sbe if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else b.dbe

    def nvmlDeviceGetRemappedRows(self, board: Board) -> tuple[int, int, int, int]:
        return self._board("nvmlDeviceGetRemappedRows", board).remapped

    def nvmlDeviceGetPcieReplayCounter(self, board: Board) -> int:
        return self._board("nvmlDeviceGetPcieReplayCounter", board).pcie_replays

    def nvmlDeviceGetNvLinkState(self, board: Board, link: int) -> int:
        b = self._board("nvmlDeviceGetNvLinkState", board)
        if not b.links:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        if link >= b.links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, board: Board, link: int, counter: int) -> int:
        b = self._board("nvmlDeviceGetNvLinkErrorCounter", board)
        assert link < b.links
        return b.link_errors[counter]

    def nvmlDeviceGetFieldValues(self, board: Board, ids: list) -> list:
        b = self._board("nvmlDeviceGetFieldValues", board)
        per_link = {k: v * b.links for k, v in b.link_errors.items()}
        answers = {
            pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: (ULL, b.energy_mj),
            pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT: (UINT, b.links),
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: (ULL, b.tx_kib),
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: (ULL, b.rx_kib),
            pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL:
                (ULL, per_link[pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT]),
            pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL:
                (ULL, per_link[pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA]),
            pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL:
                (ULL, per_link[pynvml.NVML_NVLINK_ERROR_DL_REPLAY]),
            pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL:
                (ULL, per_link[pynvml.NVML_NVLINK_ERROR_DL_RECOVERY]),
            pynvml.NVML_FI_DEV_REMAPPED_COR: (UINT, b.remapped[0]),
            pynvml.NVML_FI_DEV_REMAPPED_UNC: (UINT, b.remapped[1]),
            pynvml.NVML_FI_DEV_REMAPPED_PENDING: (UINT, b.remapped[2]),
            pynvml.NVML_FI_DEV_REMAPPED_FAILURE: (UINT, b.remapped[3]),
            pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: (UINT, b.pcie_replays),
        }
        values = (pynvml.c_nvmlFieldValue_t * len(ids))()
        for value, wanted in zip(values, ids, strict=True):
            value.fieldId, value.scopeId = wanted if isinstance(wanted, tuple) else (wanted, 0)
            if value.fieldId in b.field_fail:
                value.nvmlReturn = b.field_fail[value.fieldId]
            elif value.fieldId not in answers:
                value.nvmlReturn = NOT_SUPPORTED
            else:
                value.valueType, number = answers[value.fieldId]
                setattr(value.value, "ullVal" if value.valueType == ULL else "uiVal", number)
        return values
