"""Shards of the fleet for one evaluation cycle: lanes that run side by side.

A cycle is SQL-bound and PostgreSQL runs one statement on one core, so a cycle over the whole
fleet on one connection leaves the other cores idle. With ``PITWALL_ALERT_EVAL_LANES`` = n,
host ``h`` belongs to shard ``h % n``: each shard folds its own targets' slices, runs every
rule over them and steps their alerts on a connection and in a transaction of its own. A host's
GPUs, engines and processes go with the host, so a rule that joins them (an engine and the GPUs
it runs on, an engine and its processes) finds all of them in one shard.
"""

from __future__ import annotations

from dataclasses import dataclass

# The fleet table of the entities keyed by an id of their own, for the host they sit on.
_FLEET = {"gpu": ("fleet_gpu", "gpu_id"), "engine": ("fleet_engine", "engine_id")}


@dataclass(frozen=True)
class Shard:
    index: int = 0
    of: int = 1

    @property
    def whole(self) -> bool:
        return self.of == 1

    @property
    def code(self) -> int:
        """The value of the slice tables' ``shard`` column: their partition for this shard."""
        return self.of * 1000 + self.index

    def mark(self, entity: str) -> str:
        """The key of this shard's watermark of an entity's slices."""
        return entity if self.whole else f"{entity}@{self.index}/{self.of}"

    def hosts(self, column: str) -> str:
        """SQL: the host id in ``column`` belongs to this shard (a NULL host: shard 0)."""
        # mod(), not %: these conditions go into statements with placeholders
        return "true" if self.whole else f"mod(coalesce({column}, 0), {self.of}) = {self.index}"

    def slices(self, alias: str) -> str:
        """SQL: slice rows ``alias`` of this shard (its partition, pruned at plan time)."""
        return f"{alias}.shard = {self.code}"

    def rows(self, entity: str, alias: str) -> str:
        """SQL: rows ``alias`` of an entity's sample table that belong to this shard."""
        if self.whole:
            return "true"
        if entity not in _FLEET:  # host and proc rows carry their host id
            return self.hosts(f"{alias}.host_id")
        table, key = _FLEET[entity]
        return f"{alias}.{key} IN (SELECT id FROM {table} WHERE {self.hosts('host_id')})"


WHOLE = Shard()


def shards(n: int) -> list[Shard]:
    n = min(n, 999)  # Shard.code keeps the count in its thousands
    return [Shard(i, n) for i in range(n)] if n > 1 else [WHOLE]
