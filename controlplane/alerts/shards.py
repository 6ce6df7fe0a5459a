"""Shards of the fleet: host ``h`` belongs to shard ``h % n``, and a host's GPUs, engines and
processes go with the host.

Two uses, one rule:

- **Evaluator shards** (``PITWALL_ALERT_EVAL_SHARDS`` = n, ``leases.py``): each evaluating
  worker holds some of the n shards and runs a whole cycle for each: its hosts' raw rows, its
  own slices, its hosts' alerts.
- **Lanes** (``PITWALL_ALERT_EVAL_LANES``): within one cycle, the state half of a shard (or of
  the whole fleet) is cut again, each lane stepping its hosts' alerts on a connection and in a
  transaction of its own: reading and writing the alerts of a storm is SQL, and PostgreSQL
  runs one statement on one core.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shard:
    index: int = 0
    of: int = 1

    @property
    def whole(self) -> bool:
        return self.of == 1

    def hosts(self, column: str) -> str:
        """SQL: the host id in ``column`` belongs to this shard (a NULL host: shard 0)."""
        # mod(), not %: these conditions go into statements with placeholders
        return "true" if self.whole else f"mod(coalesce({column}, 0), {self.of}) = {self.index}"

    def holds(self, host_id: int | None) -> bool:
        """The same as ``hosts``, for a hit in Python."""
        return self.whole or (host_id or 0) % self.of == self.index

    def lanes(self, n: int) -> list[Shard]:
        """This shard cut into ``n``: host ``h`` of shard ``i`` of ``of`` is in lane ``k`` when
        ``h % (of * n) == i + k * of`` (so each lane is a shard of ``of * n``)."""
        if n <= 1:
            return [self]
        return [Shard(self.index + k * self.of, self.of * n) for k in range(n)]

    @property
    def name(self) -> str:
        """``""`` for the whole fleet, else ``index/of``: what logs and records call it."""
        return "" if self.whole else f"{self.index}/{self.of}"


WHOLE = Shard()
