"""NvmlCollector against a small fake NVML module: capability detection, units, MIG, XID."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml
import pytest

from agents.collectors.nvml import NvmlCollector

GIB = 1024**3


@dataclass
class FakeGpu:
    """One device as the fake NVML sees it; also its handle."""

    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    total: int = 80 * GIB
    used_v1: int = 13 * GIB  # v1 counts driver-reserved memory as used
    used_v2: int = 12 * GIB
    util: tuple[int, int] = (75, 40)  # gpu, memory
    temp_c: int = 61
    power_mw: int = 312_500
    limit_mw: int = 400_000
    sm_mhz: int = 1410
    mem_mhz: int = 1593
    pcie_kbs: tuple[int, int] = (2_000, 3_000)  # tx, rx
    reasons: int = pynvml.nvmlClocksThrottleReasonSwPowerCap
    ecc_uncorrected: int = 2
    fan_pct: int = 45
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # pid, bytes
    fail: dict[str, int] = field(default_factory=dict)  # NVML function -> error code raised
    mig: list[FakeGpu] | None = None  # MIG devices, when the GPU is in MIG mode
    mig_slots: int = 7
    instance_ids: tuple[int, int] = (0, 0)  # (GPU instance, compute instance) of a MIG device


class FakeNvml:
    """The pynvml functions NvmlCollector calls, as a driver of about R525 offers them: no
    nvmlDeviceGetTemperatureV and no ...ClocksEventReasons (so the fallbacks are used)."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_NotFound = pynvml.NVMLError_NotFound
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_PCIE_UTIL_TX_BYTES = pynvml.NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = pynvml.NVML_PCIE_UTIL_RX_BYTES
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_AGGREGATE_ECC = pynvml.NVML_AGGREGATE_ECC
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.calls: Counter = Counter()
        self.events: deque = deque()
        self.wait_timeouts: list[int] = []
        self.registered: list[str] = []

    def _answer(self, function: str, gpu: FakeGpu) -> FakeGpu:
        self.calls[function, gpu.uuid] += 1
        if function in gpu.fail:
            raise pynvml.NVMLError(gpu.fail[function])
        return gpu

    def push_xid(self, gpu: FakeGpu, code: int) -> None:
        xid = pynvml.nvmlEventTypeXidCriticalError
        self.events.append(SimpleNamespace(device=gpu, eventType=xid, eventData=code,
                                           gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF))

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"535.161.08"  # pynvml before 11.5 answered bytes

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return self._answer("nvmlDeviceGetUUID", gpu).uuid

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> bytes:
        return self._answer("nvmlDeviceGetName", gpu).name.encode()

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        self._answer("nvmlDeviceGetPciInfo", gpu)
        return SimpleNamespace(busId=f"00000000:{self.gpus.index(gpu) + 0x18:02X}:00.0")

    def nvmlDeviceGetMigMode(self, gpu: FakeGpu) -> list[int]:
        self._answer("nvmlDeviceGetMigMode", gpu)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig is not None else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, gpu: FakeGpu) -> int:
        return self._answer("nvmlDeviceGetMaxMigDeviceCount", gpu).mig_slots

    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu: FakeGpu, slot: int) -> FakeGpu:
        if slot >= len(gpu.mig or []):  # an empty slot, as NVML answers it
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return gpu.mig[slot]

    def nvmlDeviceGetGpuInstanceId(self, gpu: FakeGpu) -> int:
        return gpu.instance_ids[0]

    def nvmlDeviceGetComputeInstanceId(self, gpu: FakeGpu) -> int:
        return gpu.instance_ids[1]

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu, version: int | None = None) -> SimpleNamespace:
        if version is None:
            self._answer("nvmlDeviceGetMemoryInfo", gpu)
            return SimpleNamespace(total=gpu.total, used=gpu.used_v1, free=gpu.total - gpu.used_v1)
        self._answer("nvmlDeviceGetMemoryInfo_v2", gpu)
        return SimpleNamespace(version=version, total=gpu.total, reserved=GIB, used=gpu.used_v2,
                               free=gpu.total - GIB - gpu.used_v2)

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        self._answer("nvmlDeviceGetUtilizationRates", gpu)
        return SimpleNamespace(gpu=gpu.util[0], memory=gpu.util[1])

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._answer("nvmlDeviceGetTemperature", gpu).temp_c

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        return self._answer("nvmlDeviceGetPowerUsage", gpu).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu) -> int:
        return self._answer("nvmlDeviceGetEnforcedPowerLimit", gpu).limit_mw

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        self._answer("nvmlDeviceGetClockInfo", gpu)
        return {pynvml.NVML_CLOCK_SM: gpu.sm_mhz, pynvml.NVML_CLOCK_MEM: gpu.mem_mhz}[clock]

    def nvmlDeviceGetPcieThroughput(self, gpu: FakeGpu, counter: int) -> int:
        self._answer("nvmlDeviceGetPcieThroughput", gpu)
        return gpu.pcie_kbs[counter]  # NVML_PCIE_UTIL_TX_BYTES = 0, RX = 1

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: FakeGpu) -> int:
        return self._answer("nvmlDeviceGetCurrentClocksThrottleReasons", gpu).reasons

    def nvmlDeviceGetTotalEccErrors(self, gpu: FakeGpu, error_type: int, counter: int) -> int:
        assert (error_type, counter) == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                         pynvml.NVML_AGGREGATE_ECC)
        return self._answer("nvmlDeviceGetTotalEccErrors", gpu).ecc_uncorrected

    def nvmlDeviceGetFanSpeed(self, gpu: FakeGpu) -> int:
        return self._answer("nvmlDeviceGetFanSpeed", gpu).fan_pct

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[SimpleNamespace]:
        self._answer("nvmlDeviceGetComputeRunningProcesses", gpu)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes]

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, gpu: FakeGpu, types: int, event_set: str) -> None:
        self._answer("nvmlDeviceRegisterEvents", gpu)
        assert types == pynvml.nvmlEventTypeXidCriticalError and event_set == "event-set"
        self.registered.append(gpu.uuid)

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        self.wait_timeouts.append(timeout_ms)
        if not self.events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        return self.events.popleft()

    def nvmlEventSetFree(self, event_set: str) -> None:
        self.calls["nvmlEventSetFree"] += 1


def by_uuid(samples: list[dict]) -> dict[str, dict]:
    return {sample["uuid"]: sample for sample in samples}


@pytest.fixture
def warnings() -> list[str]:
    return []


def make(gpus: list[FakeGpu], warnings: list[str]) -> tuple[FakeNvml, NvmlCollector]:
    nvml = FakeNvml(gpus)
    return nvml, NvmlCollector(nvml=nvml, warn=warnings.append)


def test_it_marks_unsupported_fields_absent(warnings):
    gpu = FakeGpu("GPU-a", fail={
        "nvmlDeviceGetFanSpeed": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetTotalEccErrors": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetPcieThroughput": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetEnforcedPowerLimit": pynvml.NVML_ERROR_NO_PERMISSION,
    })
    _, collector = make([gpu], warnings)

    (sample,) = collector.collect()

    for key in ("fan_pct", "ecc_dbe_total", "pcie_tx_bps", "pcie_rx_bps", "power_limit_w"):
        assert key not in sample
    for key in ("mem_used_bytes", "util_pct", "temp_c", "power_w", "sm_clock_mhz",
                "throttle_reasons"):
        assert key in sample
    assert warnings == []  # unsupported is a fact about the device, not a problem


def test_it_converts_nvml_units_to_the_catalogs(warnings):
    _, collector = make([FakeGpu("GPU-a")], warnings)

    (sample,) = collector.collect()

    assert sample["power_w"] == pytest.approx(312.5)  # 312 500 mW
    assert sample["power_limit_w"] == pytest.approx(400.0)
    assert sample["pcie_tx_bps"] == 2_000 * 1024  # KB/s -> bytes/s
    assert sample["pcie_rx_bps"] == 3_000 * 1024
    assert sample["mem_used_bytes"] == 12 * GIB  # v2: without the driver-reserved memory
    assert sample["mem_total_bytes"] == 80 * GIB
    assert (sample["util_pct"], sample["mem_util_pct"]) == (75, 40)
    assert (sample["sm_clock_mhz"], sample["mem_clock_mhz"]) == (1410, 1593)
    assert sample["temp_c"] == 61
    assert sample["throttle_reasons"] == pynvml.nvmlClocksThrottleReasonSwPowerCap
    assert sample["ecc_dbe_total"] == 2
    assert sample["fan_pct"] == 45
    assert "xid_last" not in sample


def test_it_falls_back_to_memory_info_v1_when_the_driver_lacks_v2(warnings):
    no_v2 = {"nvmlDeviceGetMemoryInfo_v2": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
    gpu = FakeGpu("GPU-a", fail=no_v2)
    nvml, collector = make([gpu], warnings)

    samples = [collector.collect()[0] for _ in range(3)]

    assert [s["mem_used_bytes"] for s in samples] == [13 * GIB] * 3
    assert nvml.calls["nvmlDeviceGetMemoryInfo_v2", "GPU-a"] == 1


def test_it_initialises_nvml_once_across_many_collects(warnings):
    nvml, collector = make([FakeGpu("GPU-a"), FakeGpu("GPU-b")], warnings)

    for _ in range(5):
        assert len(collector.collect()) == 2
    collector.process_gpu_memory()
    collector.close()
    collector.close()

    assert nvml.calls["nvmlInit"] == 1
    assert nvml.calls["nvmlShutdown"] == 1
    assert nvml.calls["nvmlEventSetFree"] == 1
    assert collector.collect() == []  # closed: NVML is not called after shutdown


def test_it_does_not_ask_again_for_a_field_found_unsupported(warnings):
    gpu = FakeGpu("GPU-a", fail={"nvmlDeviceGetFanSpeed": pynvml.NVML_ERROR_NOT_SUPPORTED})
    nvml, collector = make([gpu], warnings)

    for _ in range(4):
        collector.collect()

    assert nvml.calls["nvmlDeviceGetFanSpeed", "GPU-a"] == 1
    assert nvml.calls["nvmlDeviceGetPowerUsage", "GPU-a"] == 4


def test_it_reads_inventory_and_driver_version(warnings):
    _, collector = make([FakeGpu("GPU-a"), FakeGpu("GPU-b", name="NVIDIA H200")], warnings)

    inventory = collector.inventory()

    assert collector.driver_version() == "535.161.08"
    assert [g["uuid"] for g in inventory] == ["GPU-a", "GPU-b"]
    assert [g["index"] for g in inventory] == [0, 1]
    assert inventory[1]["name"] == "NVIDIA H200"
    assert inventory[0]["pci_bus_id"] == "00000000:18:00.0"
    assert inventory[0]["mem_total_bytes"] == 80 * GIB
    assert inventory[0]["mig"] is None and inventory[0]["numa_node"] is None
    assert inventory[0]["simulated"] is False


def test_it_reports_a_mig_gpu_and_its_mig_devices(warnings):
    not_supported = {"nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_NOT_SUPPORTED}
    slices = [
        FakeGpu("MIG-1", name="NVIDIA A100-SXM4-80GB MIG 3g.40gb", total=40 * GIB,
                instance_ids=(1, 0), fail=not_supported, processes=[(500, 9 * GIB)]),
        FakeGpu("MIG-2", name="NVIDIA A100-SXM4-80GB MIG 3g.40gb", total=40 * GIB,
                instance_ids=(2, 0), fail=not_supported, processes=[(600, 7 * GIB)]),
    ]
    parent = FakeGpu("GPU-p", mig=slices, processes=[(500, 9 * GIB), (600, 7 * GIB)])
    nvml, collector = make([parent, FakeGpu("GPU-q")], warnings)

    inventory = {g["uuid"]: g for g in collector.inventory()}
    samples = by_uuid(collector.collect())

    assert set(inventory) == {"GPU-p", "MIG-1", "MIG-2", "GPU-q"}
    assert inventory["GPU-p"]["mig"] == {"mode": "enabled"}
    assert inventory["GPU-q"]["mig"] is None
    assert inventory["MIG-2"]["mig"] == {"parent_uuid": "GPU-p", "gpu_instance_id": 2,
                                         "compute_instance_id": 0}
    assert inventory["MIG-1"]["index"] == 0 and inventory["MIG-1"]["mem_total_bytes"] == 40 * GIB
    assert inventory["MIG-1"]["pci_bus_id"] == inventory["GPU-p"]["pci_bus_id"]
    assert samples["MIG-1"]["mem_total_bytes"] == 40 * GIB
    assert "util_pct" not in samples["MIG-1"]
    # Processes count once, on the MIG device they run in, not again on the parent.
    assert collector.process_gpu_memory() == {500: {"MIG-1": 9 * GIB}, 600: {"MIG-2": 7 * GIB}}
    assert nvml.registered == ["GPU-p", "GPU-q"]  # XID events are watched on physical GPUs


def test_it_reports_an_xid_for_the_interval_it_happened_in_only(warnings):
    gpus = [FakeGpu("GPU-a"), FakeGpu("GPU-b")]
    nvml, collector = make(gpus, warnings)
    nvml.push_xid(gpus[1], 13)
    nvml.push_xid(gpus[1], 48)  # the most recent of the interval wins

    first = by_uuid(collector.collect())
    second = by_uuid(collector.collect())

    assert first["GPU-b"]["xid_last"] == 48
    assert "xid_last" not in first["GPU-a"]
    assert "xid_last" not in second["GPU-b"]
    assert nvml.wait_timeouts and set(nvml.wait_timeouts) == {0}  # never blocks


def test_it_warns_once_and_reports_a_lost_gpu_as_lost_only(warnings):
    is_lost = {"nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_GPU_IS_LOST}
    lost = FakeGpu("GPU-lost", fail=is_lost)
    _, collector = make([FakeGpu("GPU-a"), lost, FakeGpu("GPU-c")], warnings)

    first = collector.collect()
    second = collector.collect()

    for samples in (first, second):
        assert [s["uuid"] for s in samples] == ["GPU-a", "GPU-lost", "GPU-c"]
        assert samples[1] == {"uuid": "GPU-lost", "lost": 1}  # nothing it read before counts
        assert samples[0]["lost"] == samples[2]["lost"] == 0
    assert first[0]["util_pct"] == 75
    assert [g["uuid"] for g in collector.inventory()] == ["GPU-a", "GPU-lost", "GPU-c"]
    assert len(warnings) == 1
    assert "GPU-lost" in warnings[0] and "nvml" in warnings[0] and "\n" not in warnings[0]


def test_a_lost_gpu_still_reports_the_xid_that_explains_it(warnings):
    lost = FakeGpu("GPU-lost", fail={"nvmlDeviceGetMemoryInfo_v2": pynvml.NVML_ERROR_GPU_IS_LOST})
    nvml, collector = make([lost], warnings)
    nvml.push_xid(lost, 79)  # "GPU has fallen off the bus"

    assert collector.collect() == [{"uuid": "GPU-lost", "lost": 1, "xid_last": 79}]


def test_it_warns_about_other_nvml_errors_and_drops_only_that_field(warnings):
    gpu = FakeGpu("GPU-a", fail={"nvmlDeviceGetTemperature": pynvml.NVML_ERROR_UNKNOWN})
    nvml, collector = make([gpu], warnings)

    samples = [collector.collect()[0] for _ in range(3)]

    assert all("temp_c" not in s and s["power_w"] == pytest.approx(312.5) for s in samples)
    assert nvml.calls["nvmlDeviceGetTemperature", "GPU-a"] == 3  # may be transient: asked again
    assert len(warnings) == 1 and "GPU-a" in warnings[0] and "Unknown Error" in warnings[0]


def test_it_lists_gpu_memory_per_process_and_skips_unknown_amounts(warnings):
    gpus = [FakeGpu("GPU-a", processes=[(4242, 70 * GIB), (77, None)]),
            FakeGpu("GPU-b", processes=[(4242, 71 * GIB)])]
    _, collector = make(gpus, warnings)

    assert collector.process_gpu_memory() == {4242: {"GPU-a": 70 * GIB, "GPU-b": 71 * GIB}}


def test_it_runs_without_gpus_when_nvml_cannot_start(warnings):
    nvml = FakeNvml([FakeGpu("GPU-a")], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    collector = NvmlCollector(nvml=nvml, warn=warnings.append)

    assert collector.available is False
    assert collector.collect() == [] and collector.inventory() == []
    assert collector.process_gpu_memory() == {}
    assert len(warnings) == 1 and "Driver Not Loaded" in warnings[0]
    collector.close()
    assert nvml.calls["nvmlShutdown"] == 0
