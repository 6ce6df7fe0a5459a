"""The GPU check (agents/gpu_check.py, ``make gpu-check``) against the simulated NVML, injected as
the pynvml module: each catalog GPU metric with a value or a reason, NVML's answers as reasons,
and a clean failure where NVML cannot load. No test here touches a real GPU."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from agents import gpu_check
from agents.collectors.nvml_fields import FIELDS
from agents.collectors.nvml_signals import COUNTERS
from agents.protocol import metrics_of
from agents.sim.gpus import SimNvml

ROOT = Path(__file__).resolve().parents[2]
GPU_METRICS = [m.name for m in metrics_of("gpu")]
NO_DRIVER = "libnvidia-ml.so.1 not found: no NVIDIA driver on this machine"


class Host:
    """A simulated host on an injected clock; ``between`` runs while the check waits."""

    def __init__(self, nvml: SimNvml | None = None, count: int = 2,
                 model: str = "NVIDIA H100 80GB HBM3") -> None:
        self.now = 1000.0
        self.sim = nvml or SimNvml(count=count, model=model, seed=3, clock=lambda: self.now)
        self.between = lambda: None

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.between()

    def check(self) -> int:
        return gpu_check.check(self.sim, interval=1.0, sleep=self.sleep, clock=lambda: self.now)


def report(out: str) -> dict[str, dict[str, str]]:
    """GPU line -> metric name -> what the check printed for it."""
    gpus: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        if line.startswith("GPU "):
            metrics = gpus.setdefault(line, {})
        elif line.startswith("  gpu."):
            name, shown = line.split(maxsplit=1)
            assert name not in metrics, f"{name} printed twice"
            metrics[name] = shown
    return gpus


def answering(code: int):
    """An NVML function that answers the error ``code``."""
    def function(*args):
        raise pynvml.NVMLError(code)
    return function


def test_every_gpu_metric_of_the_catalog_is_shown_for_every_gpu_with_a_value_or_a_reason(capsys):
    assert Host().check() == gpu_check.EXIT_OK

    out = capsys.readouterr().out
    gpus = report(out)
    assert len(gpus) == 2
    for metrics in gpus.values():
        assert list(metrics) == GPU_METRICS
        for name, shown in metrics.items():
            assert shown.split(":")[0] != "absent" or len(shown) > len("absent: "), name
        assert metrics["gpu.power_limit_w"] == "700 W"
        assert metrics["gpu.throttle_reasons"].startswith("0x")
        assert metrics["gpu.lost"] == "0 bool"
    assert "SIMULATED NVML" in out and "driver 550.127.08" in out
    assert out.rstrip().endswith("result: every GPU read (2) (SIMULATED NVML)")


def test_a_query_that_answers_not_supported_is_absent_with_that_answer(capsys):
    host = Host()
    host.sim.nvmlDeviceGetPowerUsage = answering(pynvml.NVML_ERROR_NOT_SUPPORTED)

    assert host.check() == gpu_check.EXIT_OK

    out = capsys.readouterr().out
    for metrics in report(out).values():
        assert metrics["gpu.power_w"] == "absent: power: NVML_ERROR_NOT_SUPPORTED (Not Supported)"
    assert out.count("never on this device: power_w, fan_pct;") == 2  # an H100 has no fan


def test_each_reader_of_a_field_is_named_with_its_answer(capsys):
    host = Host(model="NVIDIA L4")  # a PCIe board: no NVLink

    host.check()

    metrics = next(iter(report(capsys.readouterr().out).values()))
    assert metrics["gpu.nvlink_errors_total"] == (
        "absent: nvlink_errors_fields: NVML_ERROR_NOT_SUPPORTED (Not Supported); "
        "NvLinkErrorCounters: NVML_ERROR_NOT_SUPPORTED (Not Supported)")


class OlderPynvml(SimNvml):
    """A pynvml release without nvmlDeviceGetEnforcedPowerLimit."""

    @property
    def nvmlDeviceGetEnforcedPowerLimit(self):
        raise AttributeError("nvmlDeviceGetEnforcedPowerLimit")


def test_a_function_missing_from_pynvml_is_named_as_the_reason(capsys):
    host = Host()
    host.sim = OlderPynvml(count=1, clock=lambda: host.now)

    assert host.check() == gpu_check.EXIT_OK

    metrics = next(iter(report(capsys.readouterr().out).values()))
    assert metrics["gpu.power_limit_w"].startswith("absent: power_limit: missing from this pynvml")


def test_a_function_missing_from_the_driver_says_so(capsys):
    host = Host(count=1)
    host.sim.nvmlDeviceGetFanSpeed = answering(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    host.check()

    metrics = next(iter(report(capsys.readouterr().out).values()))
    assert metrics["gpu.fan_pct"] == ("absent: fan: NVML_ERROR_FUNCTION_NOT_FOUND "
                                      "(Function Not Found: this driver lacks the function)")


def test_an_xid_between_the_samples_is_shown(capsys):
    host = Host()
    host.between = lambda: host.sim.inject_xid(1, 48)

    host.check()

    first, second = report(capsys.readouterr().out).values()
    assert first["gpu.xid_last"].startswith("absent: sent only in an interval with an XID event")
    assert second["gpu.xid_last"] == "48 code"


def test_a_gpu_lost_between_the_samples_fails_the_check(capsys):
    host = Host()
    host.between = lambda: host.sim.fall_off_bus(1)

    assert host.check() == gpu_check.EXIT_UNREAD

    captured = capsys.readouterr()
    first, second = report(captured.out).values()
    assert "absent" not in first["gpu.power_w"]
    assert second["gpu.lost"] == "1 bool"
    assert second["gpu.power_w"] == "absent: the GPU is reported lost"
    assert "GPU 1 (" in captured.err and "was not read" in captured.err


class NoDriver(SimNvml):
    def nvmlInit(self) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


def test_without_the_nvml_library_it_says_so_and_exits_non_zero(capsys):
    assert Host(NoDriver()).check() == gpu_check.EXIT_NO_NVML

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"gpu-check: error: {NO_DRIVER} (NVML_ERROR_LIBRARY_NOT_FOUND)\n"


def test_without_pynvml_it_says_so_and_exits_non_zero(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml now raises ImportError

    assert gpu_check.main([]) == gpu_check.EXIT_NO_NVML

    assert "pynvml (nvidia-ml-py) is not installed" in capsys.readouterr().err


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_driver_present(), reason="this machine has an NVIDIA driver")
def test_the_command_on_a_machine_without_a_driver_fails_with_one_line():
    done = subprocess.run([sys.executable, "-m", "agents.gpu_check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)

    assert done.returncode == gpu_check.EXIT_NO_NVML
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"gpu-check: error: {NO_DRIVER} (NVML_ERROR_LIBRARY_NOT_FOUND)"]


def test_the_simulated_run_is_labelled_as_simulated(capsys):
    assert gpu_check.main(["--simulated", "--sim-gpus", "1", "--interval", "0"]) == 0

    out = capsys.readouterr().out
    assert "SIMULATED NVML (agents.sim.gpus.SimNvml): no GPU is read" in out
    assert len(report(out)) == 1


def test_field_keys_are_what_each_reader_sends():
    """The check's table of keys per field against the readers themselves, on two boards
    between which every reader answers."""
    rates = {raw: rate for raw, (rate, _scale) in COUNTERS.items()}
    answered = set()
    assert [name for name, _ in FIELDS] == list(gpu_check.FIELD_KEYS)
    for model in ("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"):  # NVLink; a fan
        sim = SimNvml(count=1, model=model, seed=3)
        sim.nvmlInit()
        handle = sim.nvmlDeviceGetHandleByIndex(0)
        for name, readers in FIELDS:
            for i, reader in enumerate(readers):
                try:
                    values = reader(sim, handle)
                except pynvml.NVMLError_NotSupported:
                    continue
                answered.add((name, i))
                assert tuple(rates.get(k, k) for k in values) == gpu_check.FIELD_KEYS[name]
    assert answered == {(name, i) for name, readers in FIELDS for i in range(len(readers))}


def test_field_keys_with_lost_and_xid_cover_the_catalog():
    keys = [key for keys in gpu_check.FIELD_KEYS.values() for key in keys]
    assert len(keys) == len(set(keys))
    assert set(keys) | {"lost", "xid_last"} == {m.key for m in metrics_of("gpu")}
