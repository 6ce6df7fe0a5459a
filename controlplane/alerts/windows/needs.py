"""What a cycle's rules need of each entity's slices: the longest window, the columns, the
masks a bitmask rule tests, the histograms."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from agents.protocol import Entity, Metric
from controlplane.alerts.windows.raw import Reading
from controlplane.alerts.windows.store import Need
from controlplane.telemetry.schema import TABLES


@dataclass
class _Wants:
    longest: int = 0
    columns: set[str] = field(default_factory=set)
    masks: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    histograms: set[Metric] = field(default_factory=set)


class Needs:
    def __init__(self) -> None:
        self._wants: dict[Entity, _Wants] = defaultdict(_Wants)

    def add(self, entity: Entity, window_s: int, columns: tuple[str, ...] = (),
            mask: tuple[str, int] | None = None, histogram: Metric | None = None) -> None:
        wants = self._wants[entity]
        wants.longest = max(wants.longest, window_s)
        wants.columns.update(columns)
        if mask:
            wants.masks[mask[0]].add(mask[1])
        if histogram:
            wants.histograms.add(histogram)

    def build(self, buckets: int) -> dict[Entity, Need]:
        """Per entity, a Need whose columns follow the table's order (so equal needs compare
        equal from cycle to cycle). ``buckets``: the most buckets a histogram layout has."""
        out = {}
        for entity, wants in self._wants.items():
            table = TABLES[entity]
            scalars = tuple(c for c in table.columns if c.name in wants.columns and not c.part)
            histograms = tuple(m for m in dict.fromkeys(c.metric for c in table.columns
                                                          if c.part) if m in wants.histograms)
            reading = Reading(entity, scalars, histograms, buckets if histograms else 0)
            masks = {c: frozenset(m) for c, m in sorted(wants.masks.items())}
            out[entity] = Need(wants.longest, reading, masks)
        return out
