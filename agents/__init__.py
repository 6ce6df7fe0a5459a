"""Pitwall agent: samples GPUs, the host and vLLM engines, and streams them to the control plane.

Installs alone on a GPU host (``pip install ./packages/pitwall-agent``, without ``sim/``): never
import Django or controlplane here.
"""

__version__ = "0.1.0"
