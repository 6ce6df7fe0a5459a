"""Exponential backoff with jitter between restarts of a crashing deployment.

1 s, 2 s, 4 s ... capped at 300 s, each shortened by up to a quarter at random so that the
instances of a host that crashed together (a driver reset) do not restart in lockstep. The
jitter only ever shortens a delay, and by less than half, so each delay still exceeds the one
before until the cap.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    base_s: float = 1.0
    cap_s: float = 300.0
    jitter: float = 0.25  # fraction a delay may be shortened by; below 0.5 keeps them growing
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0

    def next_delay(self) -> float:
        """The wait before the next start; each call counts one more failure."""
        delay = min(self.cap_s, self.base_s * 2 ** min(self.failures, 62))
        self.failures += 1
        return delay * (1.0 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self.failures = 0
