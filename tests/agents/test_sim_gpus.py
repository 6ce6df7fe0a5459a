"""The simulated GPUs, read through the real NvmlCollector: catalog bounds, engine-driven state."""

from __future__ import annotations

import http.server
import json
import re
import socket
import threading
from pathlib import Path

import pynvml
import pytest

from agents.collectors.nvml import NvmlCollector
from agents.protocol import METRICS, wire_keys
from agents.sim.gpus import SimNvml, http_state_source
from agents.sim.sim_nvml_state import state_url

GIB = 1024**3
FIXTURE = Path(__file__).parent / "fixtures" / "nvml_sim_state.json"
UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def engine_state(**overrides) -> dict:
    state = {"simulated": True, "pid": 4242, "gpu_indices": [0, 1],
             "gpu_memory_utilization": 0.9, "weights_bytes_per_gpu": 8 * GIB,
             "kv_cache_usage": 0.5, "busy_fraction": 0.9, "requests_running": 48,
             "requests_waiting": 3}
    return {**state, **overrides}


def collector(**sim_args) -> tuple[SimNvml, NvmlCollector, list[str]]:
    warnings: list[str] = []
    sim = SimNvml(**{"count": 4, "seed": 7, **sim_args})
    clock = sim_args.get("clock")
    kw = {"clock": clock} if clock is not None else {}
    return sim, NvmlCollector(nvml=sim, warn=warnings.append, **kw), warnings


def by_index(col: NvmlCollector, samples: list[dict]) -> dict[int, dict]:
    index = {gpu["uuid"]: gpu["index"] for gpu in col.inventory()}
    return {index[sample["uuid"]]: sample for sample in samples}


def test_every_gpu_metric_the_sim_supports_is_present_and_within_catalog_bounds():
    now = [100.0]
    _, col, warnings = collector(state_sources=[lambda: engine_state()], clock=lambda: now[0])
    gpu_keys = wire_keys("gpu")
    # An H100 SXM has no fan of its own; an XID only appears when one happens.
    expected = set(gpu_keys) - {"fan_pct", "xid_last"}
    col.collect()  # the NVLink rates need a first reading

    for _ in range(5):
        now[0] += 1.0
        for sample in col.collect():
            assert set(sample) - {"uuid"} == expected
            for key, value in sample.items():
                if key == "uuid":
                    continue
                metric = METRICS[f"gpu.{key}"]
                assert metric.low is None or value >= metric.low, key
                assert metric.high is None or value <= metric.high, key
                assert isinstance(value, int) or not metric.integer, key
    assert warnings == []


def test_its_units_are_plausible_for_an_h100():
    _, col, _ = collector(state_sources=[lambda: engine_state()])

    for sample in col.collect():
        assert sample["power_limit_w"] == pytest.approx(700.0)  # NVML's mW, converted
        assert 50 <= sample["power_w"] <= sample["power_limit_w"]
        assert sample["mem_total_bytes"] == 80 * GIB
        assert 0 < sample["mem_used_bytes"] < sample["mem_total_bytes"]
        assert 200 <= sample["sm_clock_mhz"] <= 2100 and 1000 <= sample["mem_clock_mhz"] <= 3000
        assert 20 <= sample["temp_c"] <= 95
        assert 0 <= sample["pcie_rx_bps"] < 64 * GIB  # below a PCIe Gen5 x16 link
        assert sample["ecc_dbe_total"] == 0


def test_inventory_uuids_are_stable_across_instances_and_distinct_across_hosts():
    first = NvmlCollector(nvml=SimNvml(hostname="node-a")).inventory()
    again = NvmlCollector(nvml=SimNvml(hostname="node-a", seed=99)).inventory()
    other = NvmlCollector(nvml=SimNvml(hostname="node-b")).inventory()

    uuids = [gpu["uuid"] for gpu in first]
    assert uuids == [gpu["uuid"] for gpu in again]
    assert len(set(uuids)) == 8 and not set(uuids) & {gpu["uuid"] for gpu in other}
    assert all(UUID.match(uuid) for uuid in uuids)
    assert all(gpu["simulated"] is True and gpu["mig"] is None for gpu in first)
    assert len({gpu["pci_bus_id"] for gpu in first}) == 8


def test_the_engines_gpus_follow_its_state_and_the_others_idle():
    _, col, _ = collector(state_sources=[lambda: engine_state(busy_fraction=0.9)])

    samples = by_index(col, col.collect())

    for index in (0, 1):
        gpu = samples[index]
        assert gpu["util_pct"] >= 80
        assert gpu["mem_used_bytes"] == pytest.approx(0.9 * gpu["mem_total_bytes"], rel=0.02)
    for index in (2, 3):
        gpu = samples[index]
        assert gpu["util_pct"] <= 2
        assert gpu["mem_used_bytes"] < 1 * GIB
    assert min(samples[i]["power_w"] for i in (0, 1)) > max(samples[i]["power_w"] for i in (2, 3))
    assert min(samples[i]["temp_c"] for i in (0, 1)) > max(samples[i]["temp_c"] for i in (2, 3))


def test_memory_stays_reserved_while_an_engine_idles():
    _, col, _ = collector(state_sources=[lambda: engine_state(busy_fraction=0.0,
                                                             kv_cache_usage=0.0)])

    gpu = by_index(col, col.collect())[0]

    assert gpu["util_pct"] <= 2
    assert gpu["mem_used_bytes"] == pytest.approx(0.9 * gpu["mem_total_bytes"], rel=0.02)


def test_the_engine_pid_appears_on_its_gpus_only():
    _, col, _ = collector(state_sources=[lambda: engine_state(pid=4242, gpu_indices=[1, 2])])
    uuids = [gpu["uuid"] for gpu in col.inventory()]

    processes = col.process_gpu_memory()

    assert set(processes) == {4242}
    assert set(processes[4242]) == {uuids[1], uuids[2]}
    for used in processes[4242].values():
        assert used == pytest.approx(0.9 * 80 * GIB, rel=0.02)


def test_an_unreachable_engine_leaves_its_gpus_idle_and_holds_no_memory():
    _, col, _ = collector(state_sources=[lambda: None])

    samples = col.collect()

    assert all(s["util_pct"] <= 2 and s["mem_used_bytes"] < 1 * GIB for s in samples)
    assert col.process_gpu_memory() == {}


def test_a_source_that_raises_is_treated_as_unreachable():
    def broken() -> dict:
        raise RuntimeError("simulated engine crashed")

    _, col, warnings = collector(state_sources=[broken])

    assert all(s["util_pct"] <= 2 for s in col.collect())
    assert warnings == []


def test_an_injected_xid_is_reported_in_one_interval():
    sim, col, _ = collector()
    sim.inject_xid(3, 79)

    first = by_index(col, col.collect())
    second = by_index(col, col.collect())

    assert first[3]["xid_last"] == 79
    assert all("xid_last" not in first[i] for i in (0, 1, 2))
    assert all("xid_last" not in sample for sample in second.values())


def test_a_board_with_a_fan_reports_its_speed():
    _, col, _ = collector(model="NVIDIA RTX 6000 Ada Generation", mem_total_bytes=48 * GIB)

    assert all(0 <= sample["fan_pct"] <= 100 for sample in col.collect())


def test_it_answers_like_nvml_before_init_and_for_functions_it_does_not_simulate():
    sim = SimNvml(count=2)

    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.nvmlDeviceGetCount()
    with pytest.raises(AttributeError):
        sim.nvmlDeviceGetBAR1MemoryInfo  # noqa: B018
    assert sim.NVML_TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU
    assert sim.NVMLError_NotSupported is pynvml.NVMLError_NotSupported


def test_memory_info_v1_counts_driver_reserved_memory_as_used():
    sim = SimNvml(count=1)
    sim.nvmlInit()
    handle = sim.nvmlDeviceGetHandleByIndex(0)

    v1 = sim.nvmlDeviceGetMemoryInfo(handle)
    v2 = sim.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)

    assert v1.used == v2.used + v2.reserved
    assert v1.total == v2.total == v1.used + v1.free


def test_the_state_url_is_derived_from_an_engines_base_or_metrics_url():
    assert state_url("http://127.0.0.1:8000/metrics") == "http://127.0.0.1:8000/sim/state"
    assert state_url("http://10.0.0.5:8001") == "http://10.0.0.5:8001/sim/state"
    assert state_url("localhost:9000") == "http://localhost:9000/sim/state"


@pytest.fixture
def engine_server():
    """A stand-in for the simulated vLLM server's /sim/state, counting its requests."""
    body = FIXTURE.read_bytes()
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200 if self.path == "/sim/state" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hits
    server.shutdown()
    server.server_close()


def test_the_http_state_source_reads_sim_state_and_caches_it_for_a_second(engine_server):
    base, hits = engine_server
    now = [100.0]
    source = http_state_source(f"{base}/metrics", clock=lambda: now[0])

    first = source()
    now[0] += 0.5
    second = source()
    now[0] += 0.6
    third = source()

    assert first == json.loads(FIXTURE.read_text()) == second == third
    assert hits == ["/sim/state", "/sim/state"]  # the 0.5 s read came from the cache


def test_the_http_state_source_answers_none_when_the_engine_is_down():
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = http_state_source(f"http://127.0.0.1:{port}/metrics")

    assert source() is None


def test_the_simulated_host_follows_engines_over_http(engine_server):
    base, _ = engine_server
    sim = SimNvml.for_host("node-7", 4, [f"{base}/metrics"], seed=3)
    col = NvmlCollector(nvml=sim)

    samples = by_index(col, col.collect())  # the fixture: pid 31337 on GPUs 2 and 3, 85 %

    assert {i for i, s in samples.items() if s["mem_used_bytes"] > 10 * GIB} == {2, 3}
    assert samples[2]["mem_used_bytes"] == pytest.approx(0.85 * 80 * GIB, rel=0.02)
    assert 60 <= samples[3]["util_pct"] <= 90  # busy_fraction 0.75
    assert set(col.process_gpu_memory()) == {31337}
