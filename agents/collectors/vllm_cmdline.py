"""The vLLM flags a running server was started with, read from its command line.

An engine Pitwall does not run (systemd, Kubernetes, a shell) is known only through its
/metrics, which do not carry the scheduler's budget (max_num_seqs, max_num_batched_tokens):
the command line of the process listening on its port does. It is read with
`agents.vllm_args.from_argv`, against the catalog of the server's own version, so a flag is
read as that release spells it. Only catalog arguments are kept: everything else (the model,
--host, --port, --api-key and its secret, a flag Pitwall does not know, a value that does
not parse) is left out, never guessed at.

Stdlib only: this runs on GPU hosts without Django.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from agents import vllm_args

# `python -m MODULE` forms that serve vLLM's OpenAI API, and the subcommand each takes first
# ("" for none). The simulated vLLM takes `vllm serve`'s flags, so it is read the same way.
_SERVE_MODULES = {
    "vllm.entrypoints.openai.api_server": "",
    "vllm.entrypoints.cli.main": "serve",
    "agents.sim.vllm_server": "",
    "agents.sim": "vllm",
}
_SERVE_SCRIPT = "vllm/entrypoints/openai/api_server.py"  # `python .../api_server.py`
# A catalog value longer than this is no flag an operator typed (a path at most): left out,
# so one odd command line cannot bloat every inventory.
MAX_VALUE_CHARS = 500


def serve_flags(argv: Sequence[str]) -> list[str] | None:
    """The tokens after `vllm serve` (or the API server's module); None when `argv` does not
    start a vLLM API server."""
    for i, token in enumerate(argv):
        if os.path.basename(token) == "vllm" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return list(argv[i + 2:])
        if token.endswith(_SERVE_SCRIPT):
            return list(argv[i + 1:])
        if token == "-m" and i + 1 < len(argv) and argv[i + 1] in _SERVE_MODULES:
            return _after_subcommand(argv[i + 2:], _SERVE_MODULES[argv[i + 1]])
    return None


def _after_subcommand(rest: Sequence[str], subcommand: str) -> list[str] | None:
    if not subcommand:
        return list(rest)
    return list(rest[1:]) if rest and rest[0] == subcommand else None


def read_args(argv: Sequence[str], version: str | None) -> dict[str, Any] | None:
    """``{dest: value}`` of the catalog flags in a vLLM server's command line, read as
    `version` spells them (unknown or unparseable: the catalog's default version); None when
    `argv` is not a vLLM server's."""
    flags = serve_flags(argv)
    if flags is None:
        return None
    try:
        read = vllm_args.from_argv(flags, version or vllm_args.DEFAULT_VERSION)
    except ValueError:  # a version string the catalog cannot place
        read = vllm_args.from_argv(flags, vllm_args.DEFAULT_VERSION)
    read.pop(vllm_args.UNRECOGNIZED, None)
    return {dest: value for dest, value in read.items() if _small(value)}


def _small(value: Any) -> bool:
    items = value if isinstance(value, list) else [value]
    return sum(len(str(item)) for item in items) <= MAX_VALUE_CHARS


def first_server(commands: dict[int, list[str]]) -> tuple[int, list[str]] | None:
    """The (pid, argv) of the lowest pid whose command line starts a vLLM API server.

    With --api-server-count > 1 the listening socket is shared by the `vllm serve` process
    and its API server children, whose titles vLLM rewrites ("VLLM::APIServer_0"): only the
    parent's command line still holds the flags."""
    for pid in sorted(commands):
        if serve_flags(commands[pid]) is not None:
            return pid, commands[pid]
    return None
