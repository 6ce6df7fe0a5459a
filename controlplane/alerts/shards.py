"""Shards of the fleet for the state half of a cycle: lanes that run side by side.

Reading and writing the alerts of a storm is SQL, and PostgreSQL runs one statement on one
core. With ``PITWALL_ALERT_EVAL_LANES`` = n, host ``h`` belongs to shard ``h % n``: each shard
steps the alerts of its hosts' targets on a connection and in a transaction of its own. A
host's GPUs, engines and processes go with the host.
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


WHOLE = Shard()


def shards(n: int) -> list[Shard]:
    return [Shard(i, n) for i in range(n)] if n > 1 else [WHOLE]
