"""Findings on engines Pitwall does not run, as reports an operator applies by hand.

Pitwall cannot restart such an engine (systemd, Kubernetes or a script started it), so its
suggestion carries the change as a command-line fragment to paste: the ``vllm serve`` flags
(``--max-num-seqs 128 --max-num-batched-tokens 4096``, spelled for the engine's vLLM version
where it reports one, else for the catalog's default version), behind a ``numactl`` binding
where the diagnosis moves it to other CPUs, and ``CUDA_VISIBLE_DEVICES`` where it gives GPUs
back. A value the engine does not report (vLLM's metrics carry the cache config, not the
scheduler budget) was read as vLLM's default for its GPU: the reasoning says so, the
confidence drops by ``ASSUMED``, and the operator compares with the flags actually in use.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from agents import vllm_args
from agents.collectors.numa import format_cpulist
from controlplane.tuning.diagnoses import Finding, assumed
from controlplane.tuning.facts import Facts

ASSUMED = 0.8  # confidence kept when the current value is vLLM's default, not reported


def as_report(facts: Facts, finding: Finding) -> Finding:
    """The finding of an engine Pitwall does not run: its changes as a fragment to paste."""
    guessed = [c["field"][5:] for c in finding.changes
               if c["field"].startswith("args.") and assumed(facts, c["field"][5:])]
    reasoning, confidence = finding.reasoning, finding.confidence
    if guessed:
        reasoning += (f" (Current {', '.join(guessed)}: vLLM's default on this GPU, assumed: "
                      f"the engine does not report it. If its command line sets another "
                      f"value, scale that one alike.)")
        confidence = round(confidence * ASSUMED, 2)
    return replace(finding, reasoning=reasoning, confidence=confidence,
                   command=command(facts, finding.changes))


def command(facts: Facts, changes: list[dict[str, Any]]) -> str:
    """``[CUDA_VISIBLE_DEVICES=…] [numactl … vllm serve … ]--flag value …``; empty for a
    report with nothing to change."""
    flags = {c["field"][5:]: c["proposed"] for c in changes if c["field"].startswith("args.")}
    prefix = []
    for c in changes:
        if c["field"] == "gpu_indices":
            prefix.append("CUDA_VISIBLE_DEVICES=" + ",".join(map(str, c["proposed"])))
        elif c["field"] == "cpus" and c["proposed"]:
            prefix += _binding(facts, c["proposed"])
    tail = shlex.join(_flags(flags, facts.vllm_version or vllm_args.DEFAULT_VERSION))
    if not prefix:
        return tail
    return " ".join([*prefix, "vllm serve …", tail]).strip()


def _flags(flags: dict[str, Any], version: str) -> list[str]:
    try:
        return vllm_args.to_argv(flags, version)
    except ValueError:  # not an argument of that version: the catalog's spelling anyway
        argv = []
        for name, value in flags.items():
            spec = vllm_args.CATALOG.get(name)
            argv += [spec.flag if spec else "--" + name.replace("_", "-"), str(value)]
        return argv


def _binding(facts: Facts, cpus: list[int]) -> list[str]:
    """numactl on those CPUs, its memory on their NUMA node where they share one (what the
    agent does for a deployment: supervisor/launch.py)."""
    node_of = {c: n for n, members in facts.host.node_cpus().items() for c in members}
    nodes = {node_of.get(c) for c in cpus}
    binding = ["numactl", f"--physcpubind={format_cpulist(cpus)}"]
    if len(nodes) == 1 and None not in nodes:
        binding.append(f"--membind={nodes.pop()}")
    return binding

