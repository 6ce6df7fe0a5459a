import threading
import uuid

import pytest

from agents.batch import BatchBuilder, inventory_hash
from agents.loop import HOST_INVENTORY_EVERY_S, Loop, Sampler, Sources, probe

GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
GPU_B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
GPU_C = "GPU-cccccccc-0000-0000-0000-000000000000"


class FakeHost:
    def __init__(self) -> None:
        self.info = {"hostname": "real-name", "cpu_count": 4, "mem_total_bytes": 1 << 34,
                     "numa_nodes": [{"id": 0, "cpus": [0, 1, 2, 3]}]}
        self.calls = 0

    def inventory(self) -> dict:
        self.inventory_reads = getattr(self, "inventory_reads", 0) + 1
        return dict(self.info)

    def collect(self) -> dict:
        self.calls += 1
        return {"load1": 0.25 * self.calls}


class FakeGpus:
    def __init__(self) -> None:
        self.memory = {100: {GPU_A: 10}, 101: {GPU_B: 20}, 200: {GPU_C: 30}}
        self.closed = False

    def inventory(self) -> list[dict]:
        return [{"uuid": uuid, "index": i, "pci_bus_id": f"00000000:{i:02x}:00.0",
                 "numa_node": None} for i, uuid in enumerate((GPU_A, GPU_B, GPU_C))]

    def driver_version(self) -> str:
        return "570.86.15"

    def collect(self) -> list[dict]:
        return [{"uuid": GPU_A, "util_pct": 50.0}]

    def process_gpu_memory(self) -> dict:
        return self.memory

    def close(self) -> None:
        self.closed = True


class FakeEngine:
    url = "http://127.0.0.1:8000/metrics"
    port = 8000

    def collect(self) -> list[dict]:
        return [{"name": "vllm:8000/0", "up": 1}]

    def inventory(self) -> list[dict]:
        return [{"name": "vllm:8000/0", "url": self.url, "model": "m", "config": {}}]


class FakeProcesses:
    def __init__(self) -> None:
        self.seen: list[dict] = []

    def find_engine_pids(self, port: int) -> list[int]:
        return [100, 101] if port == 8000 else []

    def collect(self, engine_pids: dict, gpu_mem: dict) -> list[dict]:
        self.seen.append(engine_pids)
        return [{"pid": pid, "engine": name} for name, pids in engine_pids.items()
                for pid in pids]


class Broken:
    def __getattr__(self, name):
        def fail(*args):
            raise RuntimeError("device fell off the bus")
        return fail


def sources(**overrides) -> Sources:
    kw = dict(host=FakeHost(), gpus=FakeGpus(), engines=[FakeEngine()],
              processes=FakeProcesses(), numa_node={"00000000:01:00.0": 1}.get)
    kw.update(overrides)
    return Sources(**kw)


def make_loop(src: Sources, warnings: list[str] | None = None, clock=None, sampler_clock=None):
    warn = (warnings if warnings is not None else []).append
    sent: list[dict] = []
    sampler = Sampler(src, warn=warn, wall=lambda: 1764676800.0,
                      **({"clock": sampler_clock} if sampler_clock else {}))
    loop = Loop(sampler, BatchBuilder(),
                sent.append, interval=1.0, warn=warn, **({"clock": clock} if clock else {}))
    return loop, sent


def test_seq_grows_by_one_per_batch_under_one_boot_id():
    loop, sent = make_loop(sources())
    for _ in range(3):
        loop.tick()

    assert [b["agent"]["seq"] for b in sent] == [1, 2, 3]
    assert len({b["agent"]["boot_id"] for b in sent}) == 1
    uuid.UUID(sent[0]["agent"]["boot_id"])  # a real uuid4, new at every start
    assert BatchBuilder().boot_id != sent[0]["agent"]["boot_id"]


def test_each_batch_carries_one_sample_with_every_section():
    loop, sent = make_loop(sources())
    [sample] = loop.tick()["samples"]

    assert sample["ts"] == 1764676800.0
    assert sample["host"] == {"load1": 0.25}
    assert sample["gpus"] == [{"uuid": GPU_A, "util_pct": 50.0}]
    assert sample["engines"] == [{"name": "vllm:8000/0", "up": 1}]
    assert sample["processes"] == [{"pid": 100, "engine": "vllm:8000/0"},
                                   {"pid": 101, "engine": "vllm:8000/0"}]


def test_empty_sections_are_left_out_of_the_sample():
    loop, _ = make_loop(sources(gpus=None, engines=[], processes=None))
    [sample] = loop.tick()["samples"]

    assert set(sample) == {"ts", "host"}


def test_the_inventory_rides_on_the_first_batch_and_again_only_when_it_changes():
    src, now = sources(), [0.0]
    loop, sent = make_loop(src, sampler_clock=lambda: now[0])
    loop.tick()
    loop.tick()
    src.host.info["mem_total_bytes"] *= 2
    now[0] = HOST_INVENTORY_EVERY_S  # the host part is read again once it is this old
    loop.tick()
    loop.tick()

    assert ["host" in b for b in sent] == [True, False, True, False]
    assert sent[2]["host"]["mem_total_bytes"] == 2 * sent[0]["host"]["mem_total_bytes"]


def test_the_host_part_is_read_again_only_after_a_minute():
    src, now = sources(), [100.0]
    loop, sent = make_loop(src, sampler_clock=lambda: now[0])
    loop.tick()
    src.host.info["cpu_count"] = 8
    now[0] += HOST_INVENTORY_EVERY_S - 1
    loop.tick()
    now[0] += 1
    loop.tick()

    assert src.host.inventory_reads == 2
    assert ["host" in b for b in sent] == [True, False, True]
    assert sent[2]["host"]["cpu_count"] == 8


def test_gpu_and_engine_changes_show_in_the_very_next_batch():
    src, now = sources(), [0.0]
    loop, sent = make_loop(src, sampler_clock=lambda: now[0])
    loop.tick()
    lost = src.gpus.inventory()[:2]
    src.gpus.inventory = lambda: lost  # GPU C fell off the bus
    loop.tick()
    src.gpus.memory = {100: {GPU_C: 10}, 101: {GPU_C: 20}}  # the engine moved to GPU C
    loop.tick()

    class Second(FakeEngine):
        url, port = "http://127.0.0.1:8001/metrics", 8001

        def collect(self) -> list[dict]:
            return [{"name": "vllm:8001/0", "up": 1}]

        def inventory(self) -> list[dict]:
            return [{"name": "vllm:8001/0", "url": self.url, "model": "n", "config": {}}]

    src.engines.append(Second())
    loop.tick()

    assert all("host" in b for b in sent)  # no clock moved: the host part was read once
    assert src.host.inventory_reads == 1
    assert [g["uuid"] for g in sent[1]["host"]["gpus"]] == [GPU_A, GPU_B]
    assert sent[1]["host"]["engines"][0]["gpu_uuids"] == [GPU_A, GPU_B]
    assert sent[2]["host"]["engines"][0]["gpu_uuids"] == [GPU_C]
    assert [e["name"] for e in sent[3]["host"]["engines"]] == ["vllm:8000/0", "vllm:8001/0"]


def test_a_failed_host_inventory_read_is_retried_at_the_next_interval():
    src = sources()
    loop, sent = make_loop(src, sampler_clock=lambda: 0.0)
    working = src.host.inventory
    src.host.inventory = Broken().inventory
    loop.tick()
    src.host.inventory = working
    loop.tick()

    assert "cpu_count" not in sent[0]["host"]
    assert sent[1]["host"]["cpu_count"] == 4


def test_the_inventory_is_attached_again_after_the_server_asked_for_it():
    loop, sent = make_loop(sources())
    loop.tick()
    loop.tick()
    loop.builder.inventory_needed()
    loop.tick()
    loop.tick()

    assert ["host" in b for b in sent] == [True, False, True, False]


def test_the_inventory_hash_ignores_key_order():
    assert inventory_hash({"a": 1, "b": [1, 2]}) == inventory_hash({"b": [1, 2], "a": 1})
    assert inventory_hash({"a": 1}) != inventory_hash({"a": 2})


def test_the_inventory_describes_gpus_engines_and_the_driver():
    loop, sent = make_loop(sources(hostname="sim-node-3"))
    inventory = loop.tick()["host"]

    assert inventory["hostname"] == "sim-node-3"  # --hostname wins over the system's name
    assert inventory["simulated"] is False
    assert inventory["driver_version"] == "570.86.15"
    assert [g["uuid"] for g in inventory["gpus"]] == [GPU_A, GPU_B, GPU_C]
    # NUMA node from the PCI bus where known; None where sysfs does not say.
    assert [g["numa_node"] for g in inventory["gpus"]] == [None, 1, None]


def test_an_engine_is_linked_to_the_gpus_where_its_processes_hold_memory():
    loop, _ = make_loop(sources())
    [engine] = loop.tick()["host"]["engines"]

    # pids 100 and 101 serve port 8000; pid 200 (on GPU C) belongs to someone else.
    assert engine["gpu_uuids"] == [GPU_A, GPU_B]
    assert engine["model"] == "m"


def test_the_sim_backend_marks_the_host_and_every_gpu_simulated():
    loop, _ = make_loop(sources(simulated=True))
    inventory = loop.tick()["host"]

    assert inventory["simulated"] is True
    assert all(g["simulated"] is True for g in inventory["gpus"])


@pytest.mark.parametrize("broken", ["host", "gpus", "processes"])
def test_a_collector_that_raises_is_skipped_with_one_warning(broken):
    warnings: list[str] = []
    loop, sent = make_loop(sources(**{broken: Broken()}), warnings)
    for _ in range(3):
        loop.tick()

    section = {"host": "host", "gpus": "gpus", "processes": "processes"}[broken]
    assert all(section not in b["samples"][0] for b in sent)
    assert all("engines" in b["samples"][0] for b in sent)  # the rest is still collected
    assert len({w.split(":")[0] for w in warnings}) == len(warnings)  # once per source
    assert any("device fell off the bus" in w and "RuntimeError" in w for w in warnings)
    assert all("\n" not in w for w in warnings)


def test_a_failing_inventory_read_does_not_look_like_a_change():
    src = sources()
    loop, sent = make_loop(src)
    loop.tick()
    src.host.inventory = Broken().inventory
    loop.tick()

    assert "host" not in sent[1]


class FakeTime:
    """A monotonic clock that moves only when the loop waits or a tick 'takes time'."""

    def __init__(self, tick_cost: list[float], stop_after: int) -> None:
        self.now = 100.0
        self.tick_cost = tick_cost
        self.waits: list[float] = []
        self.stop_after = stop_after

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(round(seconds, 6))
        self.now += seconds
        return len(self.waits) >= self.stop_after


def run_with(time: FakeTime, warnings: list[str]) -> list[dict]:
    src = sources()
    costs = iter(time.tick_cost)
    collect = src.host.collect

    def slow_collect() -> dict:
        time.now += next(costs)
        return collect()

    src.host.collect = slow_collect
    loop, sent = make_loop(src, warnings, clock=time.clock)
    loop.run(threading.Event(), wait=time.wait)
    return sent


def test_the_loop_keeps_a_fixed_deadline_so_slow_ticks_do_not_drift():
    time = FakeTime(tick_cost=[0.3, 0.1, 0.6, 0.0], stop_after=4)
    sent = run_with(time, [])

    assert time.waits == [0.7, 0.9, 0.4, 1.0]
    assert time.now == 104.0  # four ticks end exactly four intervals after the start
    assert len(sent) == 4


def test_the_loop_skips_ticks_it_missed_instead_of_bursting():
    warnings: list[str] = []
    time = FakeTime(tick_cost=[2.5, 0.0, 3.2, 0.0], stop_after=4)
    run_with(time, warnings)

    # 2.5 s into a 1 s interval: wait for the tick at 3 s, not catch up on the missed ones.
    assert time.waits == [0.5, 1.0, 0.8, 1.0]
    assert len(warnings) == 1 and "skipped" in warnings[0]


def test_the_loop_stops_when_told():
    stop = threading.Event()
    stop.set()
    loop, sent = make_loop(sources())
    loop.run(stop)

    assert sent == []


def test_probe_primes_the_rates_and_keeps_the_second_sample():
    src = sources()
    slept: list[float] = []
    batch = probe(Sampler(src, warn=[].append), BatchBuilder(), 2.0, sleep=slept.append)

    assert slept == [2.0]
    assert src.host.calls == 2
    assert batch["samples"][0]["host"] == {"load1": 0.5}  # the second collect
    assert batch["agent"]["seq"] == 1 and "host" in batch
