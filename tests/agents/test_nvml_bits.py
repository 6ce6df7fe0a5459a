"""agents.nvml_bits is the one home of NVML's throttle-reason bits: they must be NVML's own."""

from __future__ import annotations

import pynvml

from agents import nvml_bits

# Our name -> nvml.h's (nvmlClocksEventReason<Name>).
NVML_NAMES = {
    "NONE": "None", "GPU_IDLE": "GpuIdle", "APPLICATIONS_CLOCKS": "ApplicationsClocksSetting",
    "SW_POWER_CAP": "SwPowerCap", "HW_SLOWDOWN": "HwSlowdown", "SYNC_BOOST": "SyncBoost",
    "SW_THERMAL": "SwThermalSlowdown", "HW_THERMAL": "HwThermalSlowdown",
    "HW_POWER_BRAKE": "HwPowerBrakeSlowdown", "DISPLAY_CLOCKS": "DisplayClockSetting",
}


def test_the_bits_are_nvmls():
    for ours, theirs in NVML_NAMES.items():
        assert getattr(nvml_bits, ours) == getattr(pynvml, f"nvmlClocksEventReason{theirs}")
        assert getattr(nvml_bits, ours) == getattr(pynvml, f"nvmlClocksThrottleReason{theirs}")


def test_every_reason_is_listed_once_and_severe_is_heat_or_hardware():
    bits = [r.bit for r in nvml_bits.THROTTLE_REASONS]
    assert len(set(bits)) == len(bits) == len(NVML_NAMES) - 1  # all but NONE
    assert nvml_bits.SEVERE == (nvml_bits.HW_SLOWDOWN | nvml_bits.SW_THERMAL
                                | nvml_bits.HW_THERMAL | nvml_bits.HW_POWER_BRAKE) == 232


def test_decode():
    assert nvml_bits.decode(None) == nvml_bits.decode(0) == []
    assert [r.name for r in nvml_bits.decode(nvml_bits.SW_POWER_CAP | nvml_bits.HW_THERMAL)] == [
        "SW power cap", "HW thermal"]
