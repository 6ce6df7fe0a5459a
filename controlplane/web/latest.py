"""The latest sample of each entity, shaped for the pages' templates.

The samples come from telemetry (``controlplane.telemetry.latest``, the SQL); here they become
dicts a template can ask for any metric: an absent one reads as None.
"""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.telemetry.latest import latest_process_samples, latest_samples


class Values(dict):
    """A sample's values by wire key. An absent metric reads as None, so templates can pass
    it to a filter (``used|share:total``) without failing the lookup."""

    def __missing__(self, key: str) -> None:
        return None


class ById(dict):
    """id -> Values; an entity without a recent sample has empty Values."""

    def __missing__(self, key: int) -> Values:
        return Values()


def latest(entity: str, ids: Iterable[int]) -> ById:
    """id -> {"ts": unix s, <wire key>: value, ...} for host, gpu or engine ids."""
    return ById((i, Values(sample)) for i, sample in latest_samples(entity, ids).items())


def latest_procs(host_id: int) -> list[Values]:
    """The newest sample of each process seen recently on a host, with its CPU affinity."""
    return [Values(sample) for sample in latest_process_samples(host_id)]
