"""What the agent tells placement about its host: --label, --advertise-address, --port-range,
its roles and its cached models, checked at the command line and sent in the inventory."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from agents.cli import main
from agents.collectors.hf_cache import HfCache
from agents.collectors.host import HostCollector, HostFacts
from agents.collectors.placement_facts import address_problem, default_address
from agents.config import ConfigError, build_parser, config_from_args
from tests.agents.test_hf_cache import GB, cached_model
from tests.agents.test_host_collector import FakePsutil

SERVER = ["--server", "http://127.0.0.1:8000", "--token", "t"]


def config(*flags: str, **extra):
    args = build_parser().parse_args(["run", *SERVER, *flags])
    for name, value in extra.items():
        setattr(args, name, value)
    return config_from_args(args, env={})


def test_the_defaults_are_no_labels_the_usual_ports_and_no_roles():
    got = config()
    assert (got.labels, got.advertise_address, got.port_range, got.roles) == \
        ({}, None, (8000, 8999), ())


def test_labels_address_and_port_range_come_from_their_flags():
    got = config("--label", "pool=batch", "--label", "zone=rack-3", "--label", "empty=",
                 "--advertise-address", "10.0.0.5", "--port-range", "20100-20199")
    assert got.labels == {"pool": "batch", "zone": "rack-3", "empty": ""}
    assert got.advertise_address == "10.0.0.5"
    assert got.port_range == (20100, 20199)


def test_the_router_flag_gives_the_router_role():
    assert config(router=True).roles == ("router",)
    assert config(router=False).roles == ()


def test_the_same_label_twice_with_two_values_is_refused():
    with pytest.raises(ConfigError, match="--label pool is given twice, as 'a' and 'b'"):
        config("--label", "pool=a", "--label", "pool=b")
    assert config("--label", "pool=a", "--label", "pool=a").labels == {"pool": "a"}


def test_more_than_32_labels_are_refused():
    flags = [arg for i in range(33) for arg in ("--label", f"k{i}=v")]
    with pytest.raises(ConfigError, match="33 labels: at most 32"):
        config(*flags)


@pytest.mark.parametrize(("flags", "words"), [
    (["--label", "pool"], "expected key=value, not 'pool'"),
    (["--label", "Pool=x"], "label key 'Pool' must be 1-63 characters"),
    (["--label", "pool=a b"], "label pool: value 'a b' must be at most 63 characters"),
    (["--label", "=x"], "label key '' must be"),
    (["--port-range", "8000"], "expected LOW-HIGH"),
    (["--port-range", "9000-8000"], "1 <= LOW <= HIGH <= 65535, got 9000-8000"),
    (["--port-range", "1-70000"], "1 <= LOW <= HIGH <= 65535"),
    (["--advertise-address", "http://10.0.0.5"], "neither an IP address nor a DNS name"),
    (["--advertise-address", "10.0.0.5:80"], "neither an IP address nor a DNS name"),
])
def test_a_malformed_flag_is_a_one_line_error_naming_it(flags, words, capsys):
    assert main(["probe", *flags]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"pitwall-agent probe: error: argument {flags[0]}: "), line
    assert words in line, line


@pytest.mark.parametrize(("address", "ok"), [
    ("10.0.0.5", True), ("fd00::5", True), ("gpu-1.example.com", True), ("gpu-1", True),
    ("", False), ("-gpu", False), ("gpu_1", False), ("1.2.3.999", False), ("a" * 254, False),
    ("fe80::1%eth0", False), ("10.0.0.5/24", False),
])
def test_an_address_is_an_ip_address_or_a_dns_name(address, ok):
    assert (address_problem(address) is None) is ok


def test_the_default_address_is_the_source_address_towards_the_server():
    assert default_address("http://127.0.0.1:8000") == "127.0.0.1"
    assert default_address("https://[::1]:8443") == "::1"


def test_without_a_route_to_the_server_the_hostname_is_the_address():
    # .invalid never resolves (RFC 6761), and no server URL is no route either.
    assert default_address("http://pitwall.invalid:8000", "gpu-node-1") == "gpu-node-1"
    assert default_address(None, "gpu-node-1") == "gpu-node-1"
    assert default_address(None, "not a name") is None


def test_the_host_inventory_carries_the_facts_and_the_cached_models(tmp_path):
    cached_model(tmp_path, "models--meta-llama--Llama-3.1-8B-Instruct", {"w": 16 * GB})
    facts = HostFacts({"zone": "b", "pool": "online"}, None, "http://127.0.0.1:8000",
                      (20100, 20199), ("router",))
    host = HostCollector(psutil_module=FakePsutil(), proc_root=str(tmp_path),
                         sys_root=str(tmp_path), facts=facts, hf_cache=HfCache(tmp_path))
    inventory = host.inventory()
    assert {key: inventory[key] for key in ("labels", "address", "port_range", "roles",
                                            "hf_models")} == {
        "labels": {"pool": "online", "zone": "b"}, "address": "127.0.0.1",
        "port_range": [20100, 20199], "roles": ["router"],
        "hf_models": [{"repo": "meta-llama/Llama-3.1-8B-Instruct", "bytes": 16 * GB}]}
    assert list(inventory["labels"]) == ["pool", "zone"]  # sorted: one digest for one set


def test_probe_prints_the_facts_of_its_flags_and_its_hf_cache(tmp_path):
    cached_model(tmp_path / "hub", "models--org--cached", {"w": 3 * GB})
    done = subprocess.run(
        [sys.executable, "-m", "agents", "probe", "--gpu-backend", "none", "--interval", "0.2",
         "--label", "pool=batch", "--advertise-address", "gpu-node-1.example.com",
         "--port-range", "9000-9099"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub")})
    assert done.returncode == 0, done.stderr
    host = json.loads(done.stdout)["host"]
    assert host["labels"] == {"pool": "batch"}
    assert host["address"] == "gpu-node-1.example.com"
    assert host["port_range"] == [9000, 9099]
    assert host["roles"] == []
    assert host["hf_models"] == [{"repo": "org/cached", "bytes": 3 * GB}]
    assert host["hostname"] == socket.gethostname()


def test_the_default_address_is_looked_up_again_only_every_five_minutes(tmp_path, monkeypatch):
    import agents.collectors.host as host_module

    lookups = []

    def counted(server, hostname):
        lookups.append(server)
        return default_address(server, hostname)

    monkeypatch.setattr(host_module, "default_address", counted)
    now = [0.0]
    host = HostCollector(psutil_module=FakePsutil(), proc_root=str(tmp_path),
                         sys_root=str(tmp_path), clock=lambda: now[0],
                         facts=HostFacts(server="http://127.0.0.1:8000"))
    assert host.inventory()["address"] == "127.0.0.1"
    now[0] = 299.0
    assert host.inventory()["address"] == "127.0.0.1"
    assert len(lookups) == 1  # a DNS lookup may hang: not on every inventory
    now[0] = 300.0
    host.inventory()
    assert len(lookups) == 2
    given = HostCollector(psutil_module=FakePsutil(), proc_root=str(tmp_path),
                          sys_root=str(tmp_path), facts=HostFacts(address="10.0.0.5"))
    assert given.inventory()["address"] == "10.0.0.5"
    assert len(lookups) == 2  # --advertise-address: nothing to look up
