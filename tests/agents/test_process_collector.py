"""The process collector against real processes: a fake engine that listens and has a child."""

import os
import socket
import subprocess
import sys
import time
from collections import namedtuple

import psutil
import pytest

from agents.collectors.process import ProcessCollector, run_delay_s

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")

# Listens on a free port on 127.0.0.1, starts a child of its own, then obeys stdin:
# "busy" burns 0.2 s of its own CPU time, "reap" ends its child, "spawn" starts another one.
ENGINE = r"""
import socket, subprocess, sys, time
def child():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
kids = [child()]
print(sock.getsockname()[1], kids[0].pid, flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "busy":
        start = time.process_time()
        while time.process_time() - start < 0.2:
            pass
        print("done", flush=True)
    elif cmd == "reap":
        kids[0].kill(); kids[0].wait()
        print("done", flush=True)
    elif cmd == "spawn":
        kids.append(child())
        print(kids[-1].pid, flush=True)
"""


class Engine:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", ENGINE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        port, child = self.proc.stdout.readline().split()
        self.pid, self.port, self.child = self.proc.pid, int(port), int(child)

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def stop(self):
        for pid in psutil.Process(self.pid).children(recursive=True):
            pid.kill()
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def engine():
    engine = Engine()
    yield engine
    if engine.proc.poll() is None:
        engine.stop()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Spy:
    """Real psutil, with net_connections counted or replaced."""

    def __init__(self, net_connections=None):
        self.scans = 0
        self._replacement = net_connections

    def __getattr__(self, name):
        return getattr(psutil, name)

    def net_connections(self, kind="inet"):
        self.scans += 1
        if self._replacement:
            return self._replacement(kind)
        return psutil.net_connections(kind=kind)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def by_pid(samples):
    return {s["pid"]: s for s in samples}


def test_it_finds_the_listener_and_its_descendants(engine):
    assert ProcessCollector().find_engine_pids(engine.port) == sorted([engine.pid, engine.child])


def test_it_finds_nothing_on_a_port_nobody_listens_on():
    assert ProcessCollector().find_engine_pids(free_port()) == []


def test_it_samples_each_process_and_primes_cpu_on_the_first_call(engine):
    collector = ProcessCollector()
    pids = collector.find_engine_pids(engine.port)
    gpu_mem = {engine.pid: {"GPU-a": 3 << 20, "GPU-b": 1 << 20}}
    first = by_pid(collector.collect({"vllm:test": pids}, gpu_mem))
    assert all("cpu_pct" not in s for s in first.values())
    engine.ask("busy")
    second = by_pid(collector.collect({"vllm:test": pids}, gpu_mem))
    assert second.keys() == {engine.pid, engine.child}
    busy, idle = second[engine.pid], second[engine.child]
    assert busy["cpu_pct"] > 0
    assert idle["cpu_pct"] >= 0
    for pid, sample in second.items():
        assert sample["engine"] == "vllm:test"
        assert sample["rss_bytes"] > 0
        assert sample["threads"] >= 1
        assert sample["cpu_affinity"] == sorted(os.sched_getaffinity(pid))
    assert busy["gpu_mem_bytes"] == 4 << 20
    assert "gpu_mem_bytes" not in idle


def test_it_reports_the_numa_nodes_of_the_cpus_a_process_may_use(engine, tmp_path):
    cpus = sorted(os.sched_getaffinity(engine.pid))
    pinned = cpus[-1]
    os.sched_setaffinity(engine.pid, {pinned})
    nodes = tmp_path / "devices/system/node"
    for node, members in ((0, cpus[:-1]), (1, [pinned])):
        (nodes / f"node{node}").mkdir(parents=True)
        (nodes / f"node{node}" / "cpulist").write_text(",".join(map(str, members)) + "\n")
    samples = by_pid(ProcessCollector(sys_root=str(tmp_path)).collect(
        {"vllm:test": [engine.pid, engine.child]}, {}))
    assert samples[engine.pid]["cpu_affinity"] == [pinned]
    assert samples[engine.pid]["numa_nodes"] == [1]
    assert samples[engine.child]["cpu_affinity"] == cpus
    assert samples[engine.child]["numa_nodes"] == ([0, 1] if len(cpus) > 1 else [1])


def test_it_drops_a_process_that_is_gone_without_a_warning(engine):
    warnings = []
    collector = ProcessCollector(warn=warnings.append)
    pids = collector.find_engine_pids(engine.port)
    collector.collect({"vllm:test": pids}, {})
    engine.ask("reap")
    assert [s["pid"] for s in collector.collect({"vllm:test": pids}, {})] == [engine.pid]
    assert collector.find_engine_pids(engine.port) == [engine.pid]
    assert warnings == []


def test_it_scans_sockets_once_and_refreshes_descendants_after_the_cache_expires(engine):
    spy, clock = Spy(), Clock()
    collector = ProcessCollector(psutil_module=spy, clock=clock, cache_s=5.0)
    assert collector.find_engine_pids(engine.port) == sorted([engine.pid, engine.child])
    newcomer = int(engine.ask("spawn"))
    clock.now += 1
    assert newcomer not in collector.find_engine_pids(engine.port)  # still the cached answer
    clock.now += 5
    assert collector.find_engine_pids(engine.port) == sorted([engine.pid, engine.child,
                                                              newcomer])
    assert spy.scans == 1


def test_it_scans_again_when_the_listener_dies(engine):
    spy = Spy()
    collector = ProcessCollector(psutil_module=spy, clock=Clock())
    collector.find_engine_pids(engine.port)
    engine.stop()
    assert collector.find_engine_pids(engine.port) == []
    assert spy.scans == 2


def access_denied(kind):
    raise psutil.AccessDenied()


def test_it_asks_each_process_when_the_socket_table_is_denied(engine):
    collector = ProcessCollector(psutil_module=Spy(access_denied))
    assert collector.find_engine_pids(engine.port) == sorted([engine.pid, engine.child])


def test_it_asks_each_process_when_the_socket_owner_is_hidden(engine):
    Conn = namedtuple("Conn", "fd family type laddr raddr status pid")
    Addr = namedtuple("Addr", "ip port")

    def hidden(kind):
        return [Conn(-1, socket.AF_INET, socket.SOCK_STREAM, Addr("127.0.0.1", engine.port),
                     (), psutil.CONN_LISTEN, None)]

    collector = ProcessCollector(psutil_module=Spy(hidden))
    assert collector.find_engine_pids(engine.port) == sorted([engine.pid, engine.child])


def test_it_warns_once_when_no_readable_process_listens():
    clock, warnings = Clock(), []
    collector = ProcessCollector(psutil_module=Spy(access_denied), warn=warnings.append,
                                 clock=clock)
    port = free_port()
    assert collector.find_engine_pids(port) == []
    clock.now += 60
    assert collector.find_engine_pids(port) == []
    assert len(warnings) == 1
    assert f"port {port}" in warnings[0] and "\n" not in warnings[0]


def test_it_looks_for_a_missing_listener_less_often_than_it_refreshes_descendants():
    spy, clock = Spy(), Clock()
    collector = ProcessCollector(psutil_module=spy, clock=clock, cache_s=5.0)
    port = free_port()
    collector.find_engine_pids(port)
    clock.now += 6
    collector.find_engine_pids(port)
    assert spy.scans == 1
    clock.now += 10
    collector.find_engine_pids(port)
    assert spy.scans == 2


SPIN = "import os, sys, time\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


def spinner(cpu: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SPIN, str(cpu)])


def test_it_reports_the_time_a_process_waited_for_a_cpu_its_neighbour_held():
    """Two processes spinning on one core: each runs about half the time and waits the other
    half, which CPU time alone does not tell from a process with half a core's work."""
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"):
        pytest.skip("this kernel keeps no schedstat")
    cpu = min(os.sched_getaffinity(0))
    engine, neighbour = spinner(cpu), spinner(cpu)
    try:
        clock = Clock()
        collector = ProcessCollector(clock=clock)
        collector.collect({"vllm:1/0": [engine.pid]}, {})
        clock.now += 1.0
        time.sleep(1.0)
        [sample] = collector.collect({"vllm:1/0": [engine.pid]}, {})
    finally:
        for p in (engine, neighbour):
            p.kill()
            p.wait()
    assert sample["cpu_wait_pct"] >= 20, sample  # about 50: the neighbour holds the core
    assert sample["cpu_pct"] <= 80, sample


def test_run_delay_sums_the_threads_and_skips_one_that_exited(tmp_path):
    for tid, line in (("7", "900 2000000000 3\n"), ("8", "5 500000000 1\n"), ("9", "")):
        (tmp_path / "7" / "task" / tid).mkdir(parents=True)
        (tmp_path / "7" / "task" / tid / "schedstat").write_text(line)
    assert run_delay_s(str(tmp_path), 7) == 2.5
    assert run_delay_s(str(tmp_path), 8) is None  # gone, or no schedstat
