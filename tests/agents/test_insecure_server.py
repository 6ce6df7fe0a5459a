"""The agent refuses to send its token over plain http:// to another machine unless
--allow-insecure-http says the operator means it, and warns when it does; http:// to this
machine (tests, the dev stack) and https:// anywhere need nothing."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from agents.cli import main
from agents.config import ConfigError, build_parser, config_from_args, own_addresses
from tests.support.polling import wait_until

TOKEN = "pw_agent_do-not-print-me"


def parse(*argv: str, env: dict | None = None):
    return config_from_args(build_parser().parse_args(["run", "--token", TOKEN, *argv]),
                            env=env or {})


@pytest.mark.parametrize("server", ["http://10.0.0.5:8000", "http://pitwall.internal",
                                    "http://192.168.1.20:8000/pitwall", "http://[fd00::1]:80"])
def test_an_http_server_on_another_machine_is_refused(server):
    with pytest.raises(ConfigError, match="--allow-insecure-http") as info:
        parse("--server", server)
    assert "in clear" in str(info.value)


def test_an_http_server_from_the_environment_is_refused_too():
    with pytest.raises(ConfigError, match="--allow-insecure-http"):
        parse(env={"PITWALL_SERVER": "http://pitwall.internal:8000"})


def test_the_refusal_exits_2_without_printing_the_token(capsys):
    assert main(["run", "--server", "http://10.0.0.5:8000", "--token", TOKEN]) == 2
    err = capsys.readouterr().err
    assert "--allow-insecure-http" in err and TOKEN not in err


@pytest.mark.parametrize("server", [
    "http://127.0.0.1:8000", "http://127.0.0.2", "http://localhost:8000",
    "http://LOCALHOST.", "http://[::1]:8000", "http://0.0.0.0:8000",
    "https://pitwall.example.com", "https://10.0.0.5:8443"])
def test_this_machine_and_https_need_no_flag(server):
    config = parse("--server", server)
    assert config.server == server and not config.insecure_http


def test_an_address_of_this_machines_own_interfaces_needs_no_flag():
    """A dev stack served on the machine's LAN address: the kernel delivers it locally."""
    own = sorted(str(a) for a in own_addresses()
                 if not (a.is_loopback or a.is_link_local or a.is_unspecified))
    if not own:
        pytest.skip("this machine has no address but loopback and link-local ones")
    host = f"[{own[0]}]" if ":" in own[0] else own[0]
    assert parse("--server", f"http://{host}:8000").insecure_http is False


def test_the_flag_allows_it_and_the_agent_says_so(tmp_path):
    assert parse("--server", "http://10.0.0.5:8000", "--allow-insecure-http").insecure_http
    log = tmp_path / "agent.err"
    with log.open("wb") as err:
        # 192.0.2.1 (TEST-NET-1) is never routed: the agent spools, and warns first.
        proc = subprocess.Popen(
            [sys.executable, "-m", "agents", "run", "--server", "http://192.0.2.1:9",
             "--allow-insecure-http", "--token", TOKEN, "--gpu-backend", "sim",
             "--sim-gpus", "1", "--interval", "0.2", "--spool-dir", str(tmp_path / "spool")],
            stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_until(lambda: "plain http://" in log.read_text() or proc.poll() is not None,
                       60, lambda: log.read_text())
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    text = log.read_text()
    assert "over plain http:// (--allow-insecure-http)" in text and "192.0.2.1" in text
    assert TOKEN not in text
