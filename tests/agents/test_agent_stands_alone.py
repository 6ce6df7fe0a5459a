"""The agent installs and runs on a GPU host without the control plane: it must never import
Django or controlplane, at start or while collecting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Runs the real CLI with an import hook that makes any server-side import fail loudly.
SCRIPT = """
import sys
FORBIDDEN = ("django", "rest_framework", "controlplane", "channels", "celery", "psycopg")
class Forbid:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FORBIDDEN:
            raise ImportError(f"the agent imported {name}")
        return None
sys.meta_path.insert(0, Forbid())
from agents.cli import main
sys.exit(main(["probe", "--gpu-backend", "sim", "--sim-gpus", "2", "--interval", "0.2",
               "--hostname", "lonely-gpu-host"]))
"""


def test_the_agent_probes_without_importing_anything_of_the_server():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    batch = json.loads(done.stdout)
    assert batch["host"]["hostname"] == "lonely-gpu-host"
    assert [g["simulated"] for g in batch["host"]["gpus"]] == [True, True]
    assert "imported" not in done.stderr


def test_no_module_of_the_agent_names_the_server_packages():
    offenders = [str(path.relative_to(ROOT)) for path in (ROOT / "agents").rglob("*.py")
                 if any(line.lstrip().startswith(("import django", "from django",
                                                  "import controlplane", "from controlplane",
                                                  "from rest_framework"))
                        for line in path.read_text().splitlines())]
    assert offenders == []
