from pathlib import Path

import pytest

from agents.collectors import numa

FIXTURES = Path(__file__).parent / "fixtures"
SYS = str(FIXTURES / "host" / "sys")
BARE_SYS = str(FIXTURES / "host-bare" / "sys")


@pytest.mark.parametrize(("text", "cpus"), [
    ("0-3,8-11\n", [0, 1, 2, 3, 8, 9, 10, 11]),
    ("5", [5]),
    ("0,2,4-5", [0, 2, 4, 5]),
    ("\n", []),
])
def test_it_parses_the_kernel_cpulist_syntax(text, cpus):
    assert numa.parse_cpulist(text) == cpus


def test_it_refuses_a_cpulist_it_cannot_read():
    with pytest.raises(ValueError):
        numa.parse_cpulist("0-15:2")


def test_it_maps_each_node_to_its_cpus_and_ignores_the_other_sysfs_entries():
    assert numa.cpu_nodes(SYS) == {
        0: [0, 1, 2, 3, 8, 9, 10, 11],
        1: [4, 5, 6, 7, 12, 13, 14, 15],
    }


def test_it_finds_no_nodes_on_a_kernel_without_numa_support():
    assert numa.cpu_nodes(BARE_SYS) == {}


def test_it_puts_every_online_cpu_in_node_0_when_there_are_no_nodes():
    assert numa.node_map(BARE_SYS, cpu_count=99) == {0: [0, 1, 2, 3]}


def test_it_falls_back_to_the_cpu_count_when_sysfs_says_nothing(tmp_path):
    assert numa.node_map(str(tmp_path), cpu_count=3) == {0: [0, 1, 2]}


@pytest.mark.parametrize(("bus_id", "sysfs_name"), [
    ("00000000:18:00.0", "0000:18:00.0"),
    ("00000000:AF:00.0", "0000:af:00.0"),
    ("0000:3b:00.0", "0000:3b:00.0"),
    ("18:00.0", "0000:18:00.0"),
    ("00010000:01:00.0", "10000:01:00.0"),
])
def test_it_normalises_nvml_bus_ids_to_sysfs_names(bus_id, sysfs_name):
    assert numa.normalise_pci_bus_id(bus_id) == sysfs_name


@pytest.mark.parametrize(("bus_id", "node"), [
    ("00000000:18:00.0", 0),
    ("00000000:AF:00.0", 1),
])
def test_it_reads_the_numa_node_of_a_pci_device(bus_id, node):
    assert numa.pci_numa_node(bus_id, SYS) == node


@pytest.mark.parametrize("bus_id", [
    "00000000:3B:00.0",  # the kernel wrote -1: it does not know
    "00000000:5E:00.0",  # no such device
    "not-a-bus-id",
])
def test_it_answers_none_when_the_node_of_a_device_is_unknown(bus_id):
    assert numa.pci_numa_node(bus_id, SYS) is None


def test_it_names_the_nodes_that_hold_a_set_of_cpus():
    nodes = numa.cpu_nodes(SYS)
    assert numa.nodes_of_cpus([9], nodes) == [0]
    assert numa.nodes_of_cpus({12, 3}, nodes) == [0, 1]
    assert numa.nodes_of_cpus([], nodes) == []
    assert numa.nodes_of_cpus([64], nodes) == []
