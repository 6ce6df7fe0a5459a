"""The agent's supervisor: runs `vllm serve` instances and reconciles them to a desired config.

See supervisor.py for the entry point; instance.py holds the per-deployment state machine.
"""

from agents.supervisor.spec import DeploymentSpec, SpecError
from agents.supervisor.supervisor import Supervisor

__all__ = ["DeploymentSpec", "SpecError", "Supervisor"]
