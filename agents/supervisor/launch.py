"""What one start of a deployment runs: the command line, the environment, the CPUs to bind.

Pure apart from the sysfs read and the PATH lookup, both injectable, so every combination of
`cpus` / `numa_node` / numactl present or not is a unit test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agents.collectors.numa import parse_cpulist
from agents.supervisor.spec import DeploymentSpec

DEFAULT_COMMAND = ("vllm", "serve")
# The agent's own variables (PITWALL_TOKEN, PITWALL_TOKEN_FILE, PITWALL_SERVER, ...) stay with
# the agent: vLLM runs whatever model code it loads, which must not get the host's token.
# Only the simulated vLLM's knobs pass (agents/sim/vllm_cli.py reads PITWALL_SIM_*).
AGENT_ENV_PREFIX = "PITWALL_"
PASSED_AGENT_ENV_PREFIX = "PITWALL_SIM_"


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    cpus: list[int] | None = None  # bound in the child before exec; None: the parent's CPUs
    warnings: list[str] = field(default_factory=list)


def plan_launch(spec: DeploymentSpec, command: list[str], *, sys_root: str = "/sys",
                which: Callable[[str], str | None] = shutil.which,
                base_env: Mapping[str, str] | None = None,
                secrets: Collection[str] = ()) -> LaunchPlan:
    """`secrets`: values (the agent token) that no inherited variable may carry to vLLM."""
    argv = spec.command_line(command)
    cpus, prefix, warnings = _placement(spec, sys_root, which)
    return LaunchPlan(prefix + argv, _environment(spec, base_env, secrets), cpus, warnings)


def _environment(spec: DeploymentSpec, base_env: Mapping[str, str] | None,
                 secrets: Collection[str] = ()) -> dict[str, str]:
    env = inherited_env(os.environ if base_env is None else base_env, secrets)
    # vLLM logs through Python; unbuffered, its lines reach the log tail as they are written.
    env["PYTHONUNBUFFERED"] = "1"
    env.update(spec.env)
    # Set last: the GPUs the control plane assigned win over anything in the spec's env.
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in spec.gpu_indices)
    return env


def inherited_env(base: Mapping[str, str], secrets: Collection[str] = ()) -> dict[str, str]:
    """The agent's environment less its own variables and any variable holding a secret."""
    hidden = [s for s in secrets if s]
    return {name: value for name, value in base.items()
            if (name.startswith(PASSED_AGENT_ENV_PREFIX) or not name.startswith(AGENT_ENV_PREFIX))
            and not any(secret in value for secret in hidden)}


def _placement(spec: DeploymentSpec, sys_root: str,
               which: Callable[[str], str | None]) -> tuple[list[int] | None, list[str],
                                                           list[str]]:
    """(CPUs to bind, command prefix, warnings): explicit cpus win over the NUMA node."""
    if spec.cpus:
        return list(spec.cpus), [], []
    node = spec.numa_node
    if node is None:
        return None, [], []
    cpus = node_cpus(node, sys_root)
    numactl = which("numactl")
    prefix = [numactl, f"--membind={node}"] if numactl else []
    if cpus is None and not prefix:
        return None, [], [f"NUMA node {node} is unknown here (no cpulist in sysfs, no "
                          "numactl): started unbound"]
    warnings = []
    if cpus is None:
        prefix.insert(1, f"--cpunodebind={node}")  # numactl knows the node where sysfs did not
    if not numactl:
        warnings.append(f"numactl is not installed: CPUs bound to NUMA node {node}, "
                        "memory not")
    return cpus, prefix, warnings


def node_cpus(node: int, sys_root: str = "/sys") -> list[int] | None:
    """The CPUs of one NUMA node from sysfs, or None when the node is absent or empty."""
    try:
        text = Path(sys_root, "devices/system/node", f"node{node}", "cpulist").read_text()
        return parse_cpulist(text) or None
    except (OSError, ValueError):
        return None
