"""The agent's router role (``pitwall-agent run --router``): one vllm-router per service the
control plane routes through this host, its worker list kept equal to the replicas in
rotation. See supervisor.py; spec.py checks what the control plane sends."""

from agents.router.spec import RouterSpec, RouterSpecError, parse_routers
from agents.router.supervisor import RouterSupervisor

__all__ = ["RouterSpec", "RouterSpecError", "RouterSupervisor", "parse_routers"]
