import shutil
import socket
from collections import namedtuple
from pathlib import Path

import pytest

from agents.collectors.host import HostCollector
from agents.protocol import wire_keys

FIXTURES = Path(__file__).parent / "fixtures"

# psutil's own field names, so the collector reads the double exactly as it reads psutil.
CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait irq softirq steal guest "
                                  "guest_nice")
Vm = namedtuple("Vm", "total available")
Swap = namedtuple("Swap", "used")
Nic = namedtuple("Nic", "bytes_sent bytes_recv")
NicStats = namedtuple("NicStats", "isup flags")
Disk = namedtuple("Disk", "read_bytes write_bytes")

GIB = 1 << 30


def cpu(user=0.0, idle=0.0, iowait=0.0, guest=0.0):
    return CpuTimes(user, 0.0, 0.0, idle, iowait, 0.0, 0.0, 0.0, guest, 0.0)


class FakePsutil:
    """Scripted psutil: the real one cannot give chosen cpu_times or counter sequences."""

    def __init__(self):
        self.cpu = []  # one list of per-core CpuTimes per collect()
        self.nics = []  # one {nic: Nic} per collect()
        self.disks = []  # one {disk: Disk} per collect()

    def cpu_count(self, logical=True):
        return 16

    def cpu_times(self, percpu=False):
        return self.cpu.pop(0)

    def getloadavg(self):
        return (1.5, 1.0, 0.5)

    def virtual_memory(self):
        return Vm(total=64 * GIB, available=40 * GIB)

    def swap_memory(self):
        return Swap(used=GIB)

    def net_io_counters(self, pernic=False):
        return self.nics.pop(0)

    def net_if_stats(self):
        return {"lo": NicStats(True, "up,loopback,running"), "eth0": NicStats(True, "up"),
                "eth1": NicStats(True, "up"), "eth2": NicStats(True, "up")}

    def disk_io_counters(self, perdisk=False):
        return self.disks.pop(0)


class Clock:
    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def collector(fake, clock, root=FIXTURES / "host", warnings=None):
    return HostCollector(psutil_module=fake, proc_root=str(root / "proc"),
                         sys_root=str(root / "sys"), cgroup_root=str(root / "cgroup"),
                         warn=(warnings if warnings is not None else []).append, clock=clock)


def idle_host(fake, collects):
    """Give the double enough quiet readings for `collects` calls."""
    fake.cpu = [[cpu(idle=100.0 * n)] for n in range(1, collects + 1)]
    fake.nics = [{} for _ in range(collects)]
    fake.disks = [{} for _ in range(collects)]


def test_it_describes_the_host_in_its_inventory():
    inv = collector(FakePsutil(), Clock()).inventory()
    assert inv["hostname"] == socket.gethostname()
    assert inv["cpu_model"] == "AMD EPYC 9654 96-Core Processor"
    assert inv["cpu_count"] == 16
    assert inv["mem_total_bytes"] == 64 * GIB
    assert inv["numa_nodes"] == [{"id": 0, "cpus": [0, 1, 2, 3, 8, 9, 10, 11]},
                                 {"id": 1, "cpus": [4, 5, 6, 7, 12, 13, 14, 15]}]
    assert inv["cgroup_cpu_limit"] == 1.5  # the agent's cgroup: cpu.max "150000 100000"


def test_it_leaves_out_what_a_bare_host_does_not_say():
    inv = collector(FakePsutil(), Clock(), root=FIXTURES / "host-bare").inventory()
    assert "cpu_model" not in inv
    assert "cgroup_cpu_limit" not in inv
    assert inv["numa_nodes"] == [{"id": 0, "cpus": [0, 1, 2, 3]}]


def test_it_primes_rates_on_the_first_call_and_reports_gauges_at_once():
    fake = FakePsutil()
    idle_host(fake, 1)
    fake.nics = [{"eth0": Nic(10, 10)}]
    fake.disks = [{"sda": Disk(10, 10)}]
    sample = collector(fake, Clock(0.0)).collect()
    assert sample == {"load1": 1.5, "mem_used_bytes": 24 * GIB, "mem_total_bytes": 64 * GIB,
                      "swap_used_bytes": GIB}


def test_it_computes_cpu_busy_shares_from_time_deltas():
    fake = FakePsutil()
    idle_host(fake, 2)
    fake.cpu = [
        [cpu(user=10, idle=90), cpu(idle=100), cpu(user=0, idle=0, guest=0)],
        # core 0: 30 busy of 100; core 1: all idle or waiting on I/O; core 2: 50 of its 50 user
        # seconds were a guest's, which Linux already counts inside user.
        [cpu(user=40, idle=160), cpu(idle=150, iowait=50), cpu(user=50, idle=50, guest=50)],
    ]
    c = collector(fake, Clock(0.0, 1.0))
    c.collect()
    sample = c.collect()
    assert sample["cpu_core_pct"] == [30.0, 0.0, 50.0]
    assert sample["cpu_pct"] == pytest.approx(100 * (30 + 0 + 50) / (100 + 100 + 100), abs=0.01)


def test_it_sums_bytes_per_second_over_all_nics_but_loopback():
    fake = FakePsutil()
    idle_host(fake, 2)
    fake.nics = [{"lo": Nic(0, 0), "eth0": Nic(100, 1000), "eth1": Nic(0, 500)},
                 {"lo": Nic(10**9, 10**9), "eth0": Nic(300, 3000), "eth1": Nic(400, 1500)}]
    c = collector(fake, Clock(10.0, 12.0))
    c.collect()
    sample = c.collect()
    assert sample["net_rx_bps"] == (2000 + 1000) / 2
    assert sample["net_tx_bps"] == (200 + 400) / 2


def test_it_skips_a_counter_that_went_backwards_for_that_interval_only():
    fake = FakePsutil()
    idle_host(fake, 3)
    fake.nics = [{"eth0": Nic(0, 5000), "eth1": Nic(0, 100)},
                 {"eth0": Nic(0, 40), "eth1": Nic(0, 300), "eth2": Nic(0, 7777)},  # eth0 reset
                 {"eth0": Nic(0, 240), "eth1": Nic(0, 400), "eth2": Nic(0, 7877)}]
    c = collector(fake, Clock(0.0, 1.0, 2.0))
    c.collect()
    assert c.collect()["net_rx_bps"] == 200  # eth1 only: eth0 reset, eth2 is new
    assert c.collect()["net_rx_bps"] == 200 + 100 + 100


def test_it_leaves_a_rate_out_when_every_counter_reset():
    fake = FakePsutil()
    idle_host(fake, 2)
    fake.nics = [{"eth0": Nic(900, 900)}, {"eth0": Nic(1, 1)}]
    fake.disks = [{"sda": Disk(900, 900)}, {"sda": Disk(1, 1000)}]
    c = collector(fake, Clock(0.0, 1.0))
    c.collect()
    sample = c.collect()
    assert "net_rx_bps" not in sample and "net_tx_bps" not in sample
    assert "disk_read_bps" not in sample
    assert sample["disk_write_bps"] == 100


def test_it_counts_whole_disks_only():
    fake = FakePsutil()
    idle_host(fake, 2)
    fake.disks = [
        {"sda": Disk(0, 0), "sda1": Disk(0, 0), "nvme0n1": Disk(0, 0), "loop0": Disk(0, 0),
         "dm-0": Disk(0, 0)},
        # partitions, loop and device-mapper devices repeat bytes their disks already count
        {"sda": Disk(4096, 8192), "sda1": Disk(4096, 8192), "nvme0n1": Disk(1024, 0),
         "loop0": Disk(10**6, 10**6), "dm-0": Disk(4096, 8192)},
    ]
    c = collector(fake, Clock(0.0, 4.0))
    c.collect()
    sample = c.collect()
    assert sample["disk_read_bps"] == (4096 + 1024) / 4
    assert sample["disk_write_bps"] == 8192 / 4


def test_it_reports_cgroup_throttling(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / "host", root)
    fake = FakePsutil()
    idle_host(fake, 2)
    c = collector(fake, Clock(0.0, 1.0), root=root)
    assert "cpu_throttled_pct" not in c.collect()
    (root / "cgroup/system.slice/pitwall-agent.service/cpu.stat").write_text(
        "nr_periods 1100\nnr_throttled 110\nthrottled_usec 2600000\n")  # was 1000 / 100
    assert c.collect()["cpu_throttled_pct"] == 10.0


def test_it_keeps_collecting_when_the_cgroup_becomes_unreadable(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / "host", root)
    fake = FakePsutil()
    idle_host(fake, 2)
    warnings = []
    c = collector(fake, Clock(0.0, 1.0), root=root, warnings=warnings)
    c.collect()
    stat = root / "cgroup/system.slice/pitwall-agent.service/cpu.stat"
    stat.unlink()
    stat.mkdir()
    sample = c.collect()
    assert "cpu_throttled_pct" not in sample
    assert sample["cpu_pct"] == 0.0 and sample["mem_total_bytes"] == 64 * GIB
    assert len(warnings) == 1 and "\n" not in warnings[0] and "cgroup" in warnings[0]


def test_a_failing_source_warns_once_and_the_others_still_report():
    fake = FakePsutil()
    idle_host(fake, 2)

    def broken(perdisk=False):
        raise RuntimeError("couldn't find any physical disk")

    fake.disk_io_counters = broken
    warnings = []
    c = collector(fake, Clock(0.0, 1.0), warnings=warnings)
    c.collect()
    sample = c.collect()
    assert "disk_read_bps" not in sample
    assert sample["load1"] == 1.5 and "cpu_pct" in sample
    assert warnings == ["host.disk: RuntimeError: couldn't find any physical disk"]


def test_it_sends_only_catalog_keys_within_their_bounds_on_the_real_host():
    c = HostCollector()
    c.collect()
    sample = c.collect()
    catalog = wire_keys("host")
    assert {"cpu_pct", "cpu_core_pct", "load1", "mem_used_bytes"} <= sample.keys()
    for key, value in sample.items():
        metric = catalog[key]
        for number in value if metric.array else [value]:
            assert metric.low is None or number >= metric.low, key
            assert metric.high is None or number <= metric.high, key
            assert not metric.integer or isinstance(number, int), key
