"""The browser modules' DOM-free logic, tested by Node's built-in runner (js/*.test.js)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def test_the_dashboard_logic_passes_its_node_tests():
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: apt-get install nodejs npm (README: Requirements)")
    tests = sorted(str(p) for p in (HERE / "js").glob("*.test.js"))
    done = subprocess.run([node, "--test", *tests], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
