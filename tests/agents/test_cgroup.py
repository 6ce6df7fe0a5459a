import shutil
from pathlib import Path

import pytest

from agents.collectors.cgroup import CgroupThrottle

FIXTURES = Path(__file__).parent / "fixtures"
AGENT_CGROUP = "system.slice/pitwall-agent.service"


@pytest.fixture
def host(tmp_path):
    """A writable copy of the fake host, so a test can move cpu.stat to its second moment."""
    shutil.copytree(FIXTURES / "host", tmp_path / "host")
    return tmp_path / "host"


def write_stat(host, periods, throttled, cgroup=AGENT_CGROUP):
    (host / "cgroup" / cgroup / "cpu.stat").write_text(
        f"usage_usec 6000000\nnr_periods {periods}\nnr_throttled {throttled}\n"
        f"throttled_usec {throttled * 2500}\n")


def throttle(host, warnings=None, pid="self"):
    return CgroupThrottle(pid, proc_root=str(host / "proc"), cgroup_root=str(host / "cgroup"),
                          warn=(warnings if warnings is not None else []).append)


def test_it_primes_on_the_first_reading(host):
    assert throttle(host).collect() == {}


def test_it_reports_the_share_of_periods_that_were_throttled(host):
    collector = throttle(host)
    collector.collect()  # the fixture: 1000 periods, 100 throttled
    write_stat(host, periods=1200, throttled=150)
    assert collector.collect() == {"cpu_throttled_pct": 25.0}


def test_it_reports_zero_when_periods_passed_without_throttling(host):
    collector = throttle(host)
    collector.collect()
    write_stat(host, periods=1300, throttled=100)
    assert collector.collect() == {"cpu_throttled_pct": 0.0}


def test_it_skips_an_interval_whose_counters_went_backwards(host):
    collector = throttle(host)
    collector.collect()
    write_stat(host, periods=10, throttled=1)  # the cgroup was recreated
    assert collector.collect() == {}
    write_stat(host, periods=20, throttled=6)
    assert collector.collect() == {"cpu_throttled_pct": 50.0}


def test_it_reads_the_ancestor_that_carries_the_quota(host):
    (host / "proc" / "self" / "cgroup").write_text("0::/kubepods.slice/pod1/vllm\n")
    collector = throttle(host)
    collector.collect()  # pod1: 40 periods, 10 throttled
    write_stat(host, periods=50, throttled=11, cgroup="kubepods.slice/pod1")
    assert collector.collect() == {"cpu_throttled_pct": 10.0}


def test_it_gives_no_figure_without_a_cpu_quota(host):
    (host / "proc" / "self" / "cgroup").write_text("0::/system.slice\n")
    warnings = []
    collector = throttle(host, warnings)
    collector.collect()
    assert collector.collect() == {}
    assert warnings == []


def test_it_gives_no_figure_on_a_cgroup_v1_host():
    bare = FIXTURES / "host-bare"
    warnings = []
    collector = throttle(bare, warnings)
    collector.collect()
    assert collector.collect() == {}
    assert collector.limit_cores() is None
    assert warnings == []


@pytest.mark.parametrize("breakage", ["directory", "garbage"])
def test_it_warns_once_and_stays_absent_when_cpu_stat_is_unreadable(host, breakage):
    warnings = []
    collector = throttle(host, warnings)
    collector.collect()
    stat = host / "cgroup" / AGENT_CGROUP / "cpu.stat"
    stat.unlink()
    if breakage == "directory":
        stat.mkdir()  # reading it fails even for root, unlike a chmod
    else:
        stat.write_text("nr_periods lots\n")
    assert collector.collect() == {}
    assert collector.collect() == {}
    assert len(warnings) == 1
    assert warnings[0].startswith("cgroup: ") and "cpu.stat" in warnings[0]
    assert "\n" not in warnings[0]


def test_it_takes_the_tightest_quota_on_the_way_to_the_root(host):
    assert throttle(host).limit_cores() == 1.5
    (host / "cgroup" / "system.slice" / "cpu.max").write_text("50000 100000\n")
    assert throttle(host).limit_cores() == 0.5
