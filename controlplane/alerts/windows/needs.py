"""What a cycle's rules need of each entity's slices: per column the parts they read and the
longest window over it, and the histograms."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from agents.protocol import Entity, Metric
from controlplane.alerts.windows.raw import Reading
from controlplane.telemetry.schema import TABLES


@dataclass(frozen=True)
class Need:
    """What the rules of one cycle need of an entity's slices."""

    longest_s: int
    reading: Reading
    parts: dict[str, frozenset]  # column -> the parts folded (fold.PART_NAMES, ("mask", m))
    windows: dict[str, int]  # column or histogram key -> the longest window reading it


@dataclass
class _Wants:
    parts: dict[str, set] = field(default_factory=lambda: defaultdict(set))
    windows: dict[str, int] = field(default_factory=dict)
    histograms: set[Metric] = field(default_factory=set)


class Needs:
    def __init__(self) -> None:
        self._wants: dict[Entity, _Wants] = defaultdict(_Wants)

    def add(self, entity: Entity, window_s: int, column: str, parts: tuple = ()) -> None:
        """A rule reads these parts of a column over ``window_s``."""
        wants = self._wants[entity]
        wants.parts[column].update(parts)
        wants.windows[column] = max(wants.windows.get(column, 0), window_s)

    def add_histogram(self, metric: Metric, window_s: int) -> None:
        wants = self._wants[metric.entity]
        wants.histograms.add(metric)
        wants.windows[metric.key] = max(wants.windows.get(metric.key, 0), window_s)

    def build(self, buckets: int) -> dict[Entity, Need]:
        """Per entity, a Need whose columns follow the table's order (so equal needs compare
        equal from cycle to cycle). ``buckets``: the most buckets a histogram layout has."""
        out = {}
        for entity, wants in self._wants.items():
            table = TABLES[entity]
            scalars = tuple(c for c in table.columns if c.name in wants.parts and not c.part)
            histograms = tuple(m for m in dict.fromkeys(c.metric for c in table.columns
                                                          if c.part) if m in wants.histograms)
            reading = Reading(entity, scalars, histograms, buckets if histograms else 0)
            out[entity] = Need(max(wants.windows.values()), reading,
                               {c: frozenset(p) for c, p in sorted(wants.parts.items())},
                               dict(sorted(wants.windows.items())))
        return out
