"""NVML clocks-event (throttle) reasons for the pages and their JavaScript.

The bits, their names and which are severe live in ``agents.nvml_bits`` (also read by the
alert pack and the simulated GPUs); the pages decode a sample with ``nvml_bits.decode``.
"""

from __future__ import annotations

from dataclasses import asdict

from agents.nvml_bits import THROTTLE_REASONS


def reasons_json() -> list[dict]:
    """Every reason as ``{"bit", "name", "severe"}``, for the charts' timeline decoder."""
    return [asdict(r) for r in THROTTLE_REASONS]
