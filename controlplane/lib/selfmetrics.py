"""Pitwall's own health in Prometheus' text format (``/metrics``, docs/prometheus.md).

The metrics are ``prometheus_client`` objects defined by the apps that move them (ingest,
alerts, delivery, tuning, live push), all named ``pitwall_…``. A control plane runs several
processes: uvicorn workers, the Celery worker's pool, beat. With ``PROMETHEUS_MULTIPROC_DIR``
set (``make run`` sets it), each process writes its values to memory-mapped files there and
the process that answers ``/metrics`` sums them (``prometheus_client``'s multiprocess mode);
without it, a process exposes only its own values.

Some figures are not events but states of the database (notifications waiting, how far the
rollups lag): those are read when scraped, by collectors the endpoint passes in.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The files of a gauge summed or maxed over live processes only: "gauge_livesum_1234.db".
_LIVE_FILE = re.compile(r"^gauge_live\w*_(\d+)\.db$")


def multiprocess_dir() -> Path | None:
    value = os.environ.get(MULTIPROC_ENV, "")
    return Path(value) if value else None


def exposition(at_scrape: Iterable[Collector] = ()) -> bytes:
    """Every process's metrics (or this process's), then what ``at_scrape`` reads now."""
    directory = multiprocess_dir()
    if directory is not None:
        reap_dead(directory)
        events = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(events, path=str(directory))
        text = generate_latest(events)
    else:
        text = generate_latest(REGISTRY)
    now = CollectorRegistry(auto_describe=False)
    for collector in at_scrape:
        now.register(collector)
    return text + generate_latest(now)


def reap_dead(directory: Path) -> None:
    """Forget the live gauges of processes that are gone (a restarted uvicorn or pool
    worker): their last values would be summed forever. Counters stay: they count what
    happened, whoever counted it."""
    for path in directory.glob("gauge_live*.db"):
        match = _LIVE_FILE.match(path.name)
        if match and not _alive(int(match.group(1))):
            mark_process_dead(int(match.group(1)), str(directory))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def prepare_directory(directory: Path) -> None:
    """An empty directory for a new stack: values of a previous run would be added to it."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.glob("*.db"):
        path.unlink()
