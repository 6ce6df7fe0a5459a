"""One desired deployment, as the control plane sends it, parsed and checked once.

The control plane has already validated and rendered the vLLM flags (``argv``); the agent
checks what it needs to launch safely, so one malformed entry is refused with a message
instead of surfacing later as a TypeError inside the reconcile loop. It also checks, again,
that nothing on the command line can read as an option the control plane did not render: the
model must not start with ``-``, and ``argv`` must read back whole through the argument
catalog for the deployment's vLLM version (``agents.vllm_args.argv_problems``), so an older
or compromised control plane cannot pass ``--middleware``, ``--tool-parser-plugin`` or the
like through a value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agents import vllm_args


class SpecError(ValueError):
    pass


@dataclass(frozen=True)
class DeploymentSpec:
    id: int
    name: str
    revision: int
    model: str
    port: int
    gpu_indices: tuple[int, ...] = ()
    argv: tuple[str, ...] = ()
    cpus: tuple[int, ...] | None = None
    numa_node: int | None = None
    # Secrets (HF_TOKEN, ...): kept out of repr, so a logged spec shows none of them.
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    drain_timeout_s: float = 30.0
    vllm_version: str = vllm_args.DEFAULT_VERSION

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DeploymentSpec:
        try:
            version = _text(raw.get("vllm_version") or vllm_args.DEFAULT_VERSION,
                            "vllm_version")
            return cls(
                id=_int(raw["id"], "id"), name=str(raw.get("name", "")),
                revision=_int(raw["revision"], "revision"), model=_model(raw["model"]),
                port=_port(raw["port"]),
                gpu_indices=_ints(raw.get("gpu_indices") or [], "gpu_indices"),
                argv=_flags(raw.get("argv") or [], version), vllm_version=version,
                cpus=None if raw.get("cpus") is None else _ints(raw["cpus"], "cpus"),
                numa_node=None if raw.get("numa_node") is None else _int(raw["numa_node"],
                                                                         "numa_node"),
                env=_env(raw.get("env") or {}),
                drain_timeout_s=_seconds(raw.get("drain_timeout_s", 30.0)))
        except KeyError as exc:
            raise SpecError(f"deployment {raw.get('id', '?')}: missing {exc.args[0]}") from None
        except SpecError as exc:
            raise SpecError(f"deployment {raw.get('id', '?')}: {exc}") from None

    def command_line(self, command: list[str]) -> list[str]:
        """`vllm serve MODEL --port N <flags>`: the launcher prefix, then vLLM's own form."""
        return [*command, self.model, "--port", str(self.port), *self.argv]


def parse_specs(deployments: list[Mapping[str, Any]]) -> dict[int, DeploymentSpec]:
    """Every entry parsed, keyed by id; SpecError names the first bad one."""
    specs: dict[int, DeploymentSpec] = {}
    for raw in deployments:
        if not isinstance(raw, Mapping):
            raise SpecError(f"a deployment must be an object, not {type(raw).__name__}")
        spec = DeploymentSpec.from_dict(raw)
        if spec.id in specs:
            raise SpecError(f"deployment {spec.id} is listed twice")
        specs[spec.id] = spec
    return specs


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{name} must be an integer, not {value!r}")
    return value


def _ints(values: Any, name: str) -> tuple[int, ...]:
    if not isinstance(values, list | tuple):
        raise SpecError(f"{name} must be a list of integers")
    out = tuple(_int(v, name) for v in values)
    if any(v < 0 for v in out):
        raise SpecError(f"{name} must not be negative")
    return out


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(f"{name} must be a non-empty string")
    return value


def _strings(values: Any, name: str) -> tuple[str, ...]:
    if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
        raise SpecError(f"{name} must be a list of strings")
    return tuple(values)


def _model(value: Any) -> str:
    model = _text(value, "model")
    if vllm_args.option_like(model):
        raise SpecError(f"model {model!r} would be read as an option (it starts with '-')")
    return model


def _flags(values: Any, version: str) -> tuple[str, ...]:
    argv = _strings(values, "argv")
    if problems := vllm_args.argv_problems(argv, version):
        raise SpecError("argv refused: " + "; ".join(problems))
    return argv


def _port(value: Any) -> int:
    port = _int(value, "port")
    if not 1 <= port <= 65535:
        raise SpecError(f"port {port} is out of range")
    return port


def _env(values: Any) -> dict[str, str]:
    if not isinstance(values, Mapping) or not all(
            isinstance(k, str) and k and "=" not in k and isinstance(v, str)
            for k, v in values.items()):
        raise SpecError("env must map variable names to strings")
    return dict(values)


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise SpecError(f"drain_timeout_s must be a non-negative number, not {value!r}")
    return float(value)
