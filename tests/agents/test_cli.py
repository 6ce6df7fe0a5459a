import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agents.cli import main
from agents.config import ConfigError, build_parser, config_from_args, default_spool_dir
from agents.spool import Spool
from tests.agents.fake_ingest import FakeIngest, free_port
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "pw_agent_do-not-print-me"
# The tests that run the agent as a process of its own.
starts_the_agent = pytest.mark.slow(seconds=2)


def nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


def agent(*args: str, **kw) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITWALL_")}
    return subprocess.Popen([sys.executable, "-m", "agents", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def parse(*argv: str, env: dict | None = None):
    return config_from_args(build_parser().parse_args(list(argv)), env or {})


@starts_the_agent
def test_probe_with_the_sim_backend_prints_one_batch_with_two_simulated_gpus():
    proc = agent("probe", "--gpu-backend", "sim", "--sim-gpus", "2", "--interval", "0.2",
                 "--hostname", "sim-node-1")
    out, err = proc.communicate(timeout=120)

    assert proc.returncode == 0, err
    batch = json.loads(out)
    assert batch["protocol"] == 1 and batch["agent"]["seq"] == 1
    assert batch["host"]["hostname"] == "sim-node-1"
    assert batch["host"]["simulated"] is True
    gpus = batch["host"]["gpus"]
    assert len(gpus) == 2 and all(g["simulated"] is True for g in gpus)
    [sample] = batch["samples"]
    assert {g["uuid"] for g in sample["gpus"]} == {g["uuid"] for g in gpus}
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["run", "--bogus"],
    ["probe", "--interval", "-1"],
    ["probe", "--gpu-backend", "amd"],
    ["probe", "--sim-gpus", "0"],
    ["probe", "--vllm-metrics-url", "localhost:8000"],
    ["run", "--token", "a", "--token-file", "/x"],
    [],
])
def test_a_bad_flag_is_an_argparse_error_with_exit_code_2(argv, capsys):
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert main(["run", "--help"]) == 0
    assert "--token-file" in capsys.readouterr().out


@pytest.mark.skipif(nvml_works(), reason="this machine has a working NVIDIA driver")
@starts_the_agent
def test_run_with_nvml_on_a_machine_without_gpus_is_a_one_line_error(tmp_path):
    proc = agent("run", "--server", f"http://127.0.0.1:{free_port()}", "--token", TOKEN,
                 "--spool-dir", str(tmp_path / "spool"))
    out, err = proc.communicate(timeout=120)

    assert proc.returncode == 2
    assert out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("pitwall-agent: error:") and "--gpu-backend sim" in line
    assert TOKEN not in err
    assert not (tmp_path / "spool").exists()  # failed before touching anything


@pytest.mark.skipif(nvml_works(), reason="this machine has a working NVIDIA driver")
def test_probe_with_nvml_on_a_machine_without_gpus_warns_and_reports_the_host(capsys):
    assert main(["probe", "--interval", "0.05", "--hostname", "plain-host"]) == 0
    out, err = capsys.readouterr()

    batch = json.loads(out)
    assert batch["host"]["gpus"] == [] and "gpus" not in batch["samples"][0]
    assert "host" in batch["samples"][0]
    assert "NVML is not available" in err and "--gpu-backend sim" in err


def test_a_host_without_gpus_says_so_and_reports_no_gpus_and_no_nvml_warning(capsys):
    assert main(["probe", "--gpu-backend", "none", "--interval", "0.05",
                 "--hostname", "cpu-host"]) == 0
    out, err = capsys.readouterr()

    batch = json.loads(out)
    assert batch["host"]["gpus"] == [] and "gpus" not in batch["samples"][0]
    assert "NVML" not in err and not batch["host"].get("simulated")


def test_run_without_a_token_says_how_to_give_one(capsys, monkeypatch):
    monkeypatch.delenv("PITWALL_TOKEN", raising=False)
    monkeypatch.delenv("PITWALL_TOKEN_FILE", raising=False)
    assert main(["run", "--server", "http://127.0.0.1:9"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--token-file" in line


def test_the_token_comes_from_flags_then_files_then_the_environment(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}-file\n")
    env = {"PITWALL_SERVER": "https://pitwall.example", "PITWALL_TOKEN": f"{TOKEN}-env"}

    assert parse("run", "--token", "flag", env=env).token == "flag"
    assert parse("run", "--token-file", str(token_file), env=env).token == f"{TOKEN}-file"
    assert parse("run", env=env).token == f"{TOKEN}-env"
    assert parse("run", env={**env, "PITWALL_TOKEN": "",
                             "PITWALL_TOKEN_FILE": str(token_file)}).token == f"{TOKEN}-file"
    config = parse("run", "--server", "https://other:8000", env=env)
    assert config.server == "https://other:8000"
    assert TOKEN not in repr(config)


def test_an_unreadable_token_file_is_named_without_printing_anything_secret(tmp_path):
    with pytest.raises(ConfigError, match="token file") as info:
        parse("run", "--server", "http://x", "--token-file", str(tmp_path / "missing"))
    assert "missing" in str(info.value)


def test_the_default_spool_lives_under_var_lib_for_root_and_the_state_dir_otherwise():
    assert default_spool_dir(euid=0) == Path("/var/lib/pitwall-agent/spool")
    home_default = default_spool_dir(euid=1000, env={})
    assert home_default == Path.home() / ".local/state/pitwall-agent/spool"
    assert default_spool_dir(euid=1000, env={"XDG_STATE_HOME": "/s"}) == Path(
        "/s/pitwall-agent/spool")


def test_spool_max_bytes_takes_binary_suffixes():
    assert parse("probe", "--spool-max-bytes", "256MiB").spool_max_bytes == 256 * 2**20
    assert parse("probe", "--spool-max-bytes", "1G").spool_max_bytes == 2**30
    assert parse("probe", "--spool-max-bytes", "4096").spool_max_bytes == 4096


@starts_the_agent
def test_run_streams_batches_and_stops_cleanly_on_sigterm(tmp_path):
    (tmp_path / "token").write_text(TOKEN)
    with FakeIngest() as server:
        proc = agent("run", "--server", server.url, "--token-file", str(tmp_path / "token"),
                     "--gpu-backend", "sim", "--sim-gpus", "2", "--interval", "0.1",
                     "--hostname", "sim-node-2", "--spool-dir", str(tmp_path / "spool"))
        try:
            assert server.wait_for(3), "the agent sent nothing"
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)

    assert proc.returncode == 0, err
    assert "Traceback" not in err and TOKEN not in err + out
    batches = [b for r in server.requests for b in r.batches]
    seqs = [b["agent"]["seq"] for b in batches]
    assert seqs == list(range(1, len(seqs) + 1))
    assert batches[0]["host"]["hostname"] == "sim-node-2"
    assert server.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"


@starts_the_agent
def test_run_spools_while_the_server_is_down_and_keeps_the_spool_after_sigterm(tmp_path):
    spool_dir = tmp_path / "spool"
    proc = agent("run", "--server", f"http://127.0.0.1:{free_port()}", "--token", TOKEN,
                 "--gpu-backend", "sim", "--sim-gpus", "1", "--interval", "0.1",
                 "--spool-dir", str(spool_dir))
    try:
        wait_until(lambda: proc.poll() is not None or list(spool_dir.glob("*.json.gz")), 60,
                   lambda: "the agent spooled nothing", every=0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)

    assert proc.returncode == 0, err
    seqs = [s.batch["agent"]["seq"] for s in Spool(spool_dir, 10**9).peek()]
    assert seqs and seqs == list(range(1, len(seqs) + 1))
    assert len([line for line in err.splitlines() if "unreachable" in line]) == 1

