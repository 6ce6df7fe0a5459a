"""The agent's supervisor restarting a real vLLM to a new revision while requests run."""

from __future__ import annotations

import pytest

from tests.real_vllm.restart import group_gone, restart_under_load

pytestmark = pytest.mark.real_vllm


def test_a_graceful_restart_under_load_finishes_every_request_then_runs_the_new_flags(
        vllm_install, tmp_path):
    result = restart_under_load(vllm_install, tmp_path, requests=16, tokens=300)

    assert result.failures == [] and result.lost == 0, result.failures
    status = result.new_status
    assert status["revision"] == 2 and status["pid"] != result.old_pid
    cmdline = result.new_cmdline
    assert cmdline[cmdline.index("--max-num-seqs") + 1] == "64"
    # The old API server took its EngineCore and worker with it.
    assert group_gone(result.old_pid)
    # It exited by itself, exit code 0, before any SIGKILL.
    drained = [line for line in result.log if "drained in" in line]
    assert drained and drained[0].endswith("exit code 0"), result.log
    assert not any("SIGKILL to the process group" in line for line in result.log)
