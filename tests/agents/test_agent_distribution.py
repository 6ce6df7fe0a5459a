"""The agent's own distribution (packages/pitwall-agent) installs alone: in a fresh virtual
environment it brings the ``pitwall-agent`` command, agents/ without the simulator and three
dependencies, and nothing of the control plane."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = Path("packages", "pitwall-agent")

# Checked with ``python -I``: neither the working directory nor PYTHONPATH can lend a module.
IMPORTS = """
import importlib.metadata, importlib.util, json, agents
print(json.dumps({
    "agents": agents.__file__,
    "absent": [name for name in ("controlplane", "django", "rest_framework", "agents.sim")
               if importlib.util.find_spec(name) is not None],
    "distributions": sorted(d.metadata["Name"].lower().replace("_", "-")
                            for d in importlib.metadata.distributions()),
}))
"""


def _run(*command: str | Path, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE")}
    return subprocess.run([str(part) for part in command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the distribution installed from a copy of the two folders it reads
    (its build writes beside its pyproject.toml, never in the shared checkout; a third folder
    it needed would be missing here). Dependencies come from the index pip is configured with."""
    work = tmp_path_factory.mktemp("agent-distribution")
    build_junk = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    shutil.copytree(ROOT / "agents", work / "agents", ignore=build_junk)
    shutil.copytree(ROOT / DISTRIBUTION, work / DISTRIBUTION, ignore=build_junk)
    venv = work / "venv"
    made = _run(sys.executable, "-m", "venv", venv, cwd=work)
    assert made.returncode == 0, made.stderr
    done = _run(venv / "bin" / "python", "-m", "pip", "install", "--quiet",
                "--disable-pip-version-check", work / DISTRIBUTION, cwd=work, timeout=300)
    assert done.returncode == 0, done.stderr
    (work / "elsewhere").mkdir()
    return venv


@pytest.mark.slow(seconds=20)
def test_it_installs_the_agent_with_its_three_dependencies_and_nothing_of_the_server(installed):
    done = _run(installed / "bin" / "python", "-I", "-c", IMPORTS, cwd=installed.parent)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert Path(found["agents"]).is_relative_to(installed)
    assert found["absent"] == []
    assert set(found["distributions"]) - {"pip", "setuptools"} == {
        "pitwall-agent", "prometheus-client", "psutil", "nvidia-ml-py"}


@pytest.mark.slow(seconds=1)
def test_it_installs_every_module_of_the_agent_but_the_simulator(installed):
    site = next(installed.glob("lib/python3*/site-packages"))
    wanted = {path.relative_to(ROOT).as_posix() for path in (ROOT / "agents").rglob("*.py")
              if path.relative_to(ROOT / "agents").parts[0] != "sim"}
    got = {path.relative_to(site).as_posix() for path in (site / "agents").rglob("*.py")}
    assert got == wanted


@pytest.mark.slow(seconds=3)
def test_the_console_script_probes_a_host_without_gpus(installed):
    agent = installed / "bin" / "pitwall-agent"
    helped = _run(agent, "--help", cwd=installed.parent / "elsewhere")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: pitwall-agent")
    probed = _run(agent, "probe", "--gpu-backend", "none", "--interval", "0.2",
                  "--hostname", "lonely-gpu-host", cwd=installed.parent / "elsewhere")
    assert probed.returncode == 0, probed.stderr
    assert json.loads(probed.stdout)["host"]["hostname"] == "lonely-gpu-host"


@pytest.mark.slow(seconds=1)
def test_asking_it_to_simulate_gpus_says_the_simulator_is_left_out(installed):
    done = _run(installed / "bin" / "pitwall-agent", "probe", "--gpu-backend", "sim",
                cwd=installed.parent / "elsewhere")
    assert done.returncode == 2
    assert "the pitwall-agent distribution leaves the simulator out" in done.stderr


def test_its_dependencies_are_the_agent_extra_of_the_control_plane():
    """Two homes for one list, kept equal: `make install` takes the extra (the simulated fleet
    runs the real agent), a GPU host the distribution."""
    top = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    agent = tomllib.loads((ROOT / DISTRIBUTION / "pyproject.toml").read_text())["project"]
    assert agent["dependencies"] == top["optional-dependencies"]["agent"]
    assert agent["requires-python"] == top["requires-python"]
    assert agent["scripts"] == top["scripts"]
