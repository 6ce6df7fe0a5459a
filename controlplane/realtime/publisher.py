"""The ingest process's live publisher: committed batches -> events for watched groups.

The ingest path must stay lean (docs/architecture.md) and must never depend on Redis, so:
- ``on_commit`` runs in the writer's flush, after the requests were answered. It does no I/O:
  set lookups against the watched groups and, for the few that match, a bounded queue append.
  With nobody watching it returns at once.
- One background task reads the interest set about once a second (and at once when the
  interest version it polls every ``POLL_S`` says a socket subscribed), builds the queued events
  (one JSON text each) and sends them through ``publish()``; the fleet summary goes out at
  most once per ``LIVE_FLEET_INTERVAL_MS`` with the hosts that reported since the last one.
- Redis down: the first failure logs one line, drops what is queued and stops queueing (no
  group is watched any more); the next interest read that succeeds resumes and logs once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Collection, Sequence

from django.conf import settings

from controlplane.realtime import interest
from controlplane.realtime.channel_layer import LAYER_ERRORS, publish
from controlplane.realtime.events import encode
from controlplane.realtime.events_from_rows import (
    ENGINE,
    Rows,
    batch_ts,
    engine_event,
    fleet_event,
    host_event,
)
from controlplane.realtime.groups import FLEET, engine_group, host_group

log = logging.getLogger(__name__)

MAX_QUEUE = 1000  # queued events; past it the oldest is dropped (counted in ``dropped``)
MAX_BATCHES_PER_EVENT = 60  # a spool replay of a watched host sends its newest samples only
SEND_CHUNK = 32  # events sent concurrently
SEND_TIMEOUT_S = 5.0
POLL_S = 0.1  # a new subscription is seen this soon (one GET per poll)

Job = tuple[str, int, list]  # ("host", host id, [rows, ...]) or ("engine", id, [row, ...])


class Publisher:
    def __init__(self, layouts: dict[tuple, int]) -> None:
        conf = settings.PITWALL
        self.fleet_every_s = conf["LIVE_FLEET_INTERVAL_MS"] / 1000
        self.refresh_every_s = conf["LIVE_INTEREST_REFRESH_MS"] / 1000
        self.layouts = layouts  # the ingest LayoutCache's bounds -> id, inverted on demand
        self._bounds: dict[int, tuple] = {}
        self._hosts: frozenset[int] = frozenset()  # watched host and engine ids
        self._engines: frozenset[int] = frozenset()
        self._fleet_on = False
        self._queue: deque[Job] = deque()
        self._fleet: dict[int, tuple[float, Rows]] = {}  # host -> (ts, newest rows)
        self._fleet_sent = -math.inf
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._version: int | None = None  # interest version of the last read
        self.down = False
        self.dropped = 0

    async def start(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()  # bound to the loop the server runs
            self._task = asyncio.create_task(self._run(), name="pitwall-live-publisher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=SEND_TIMEOUT_S)
            self._task = None

    def watches(self, group: str) -> bool:
        """Whether events for this channel-layer group are being built now."""
        kind, _, ident = group.partition(".")
        ids = {"host": self._hosts, "engine": self._engines}.get(kind, frozenset())
        return self._fleet_on if group == FLEET else ident.isdigit() and int(ident) in ids

    def watches_host(self, host_id: int, engine_ids: Collection[int]) -> bool:
        """Whether a page shows this host or one of its engines (ingest then asks its agent
        for each sample at once). The fleet page does not count: it shows every host's newest
        values, for which a held batch's last sample does."""
        return host_id in self._hosts or bool(self._engines) and not self._engines.isdisjoint(
            engine_ids)

    # -- in the writer's flush ------------------------------------------------------------

    def on_commit(self, work: Sequence) -> None:
        """Queue events for the committed batches (``Work`` items) that someone watches."""
        if not (self._hosts or self._engines or self._fleet_on):
            return
        hosts: dict[int, list[Rows]] = {}
        engines: dict[int, list[tuple]] = {}
        fleet_was_empty = not self._fleet  # the first host since the last summary wakes it
        for item in work:
            rows = item.rows
            if self._fleet_on:
                self._remember(item.host_id, rows)
            if item.host_id in self._hosts:
                hosts.setdefault(item.host_id, []).append(rows)
            if self._engines:
                for row in rows.get(ENGINE.name, ()):
                    if row[0] in self._engines:
                        engines.setdefault(row[0], []).append(row)
        for host_id, batches in hosts.items():
            self._enqueue(("host", host_id, batches[-MAX_BATCHES_PER_EVENT:]))
        for engine_id, engine_rows in engines.items():
            self._enqueue(("engine", engine_id, engine_rows[-MAX_BATCHES_PER_EVENT:]))
        if hosts or engines or (fleet_was_empty and self._fleet):
            self._wake.set()

    def _remember(self, host_id: int, rows: Rows) -> None:
        ts = batch_ts(rows)
        seen = self._fleet.get(host_id)
        if seen is None or ts >= seen[0]:  # a replay of old batches does not hide new values
            self._fleet[host_id] = (ts, rows)

    def _enqueue(self, job: Job) -> None:
        if len(self._queue) >= MAX_QUEUE:
            self._queue.popleft()
            self.dropped += 1
        self._queue.append(job)

    # -- the background task --------------------------------------------------------------

    async def _run(self) -> None:
        next_refresh = next_poll = 0.0
        while True:
            try:
                now = time.monotonic()
                if now >= next_poll:
                    next_poll = now + POLL_S
                    if now >= next_refresh or await self._subscribed_since():
                        next_refresh = now + self.refresh_every_s
                        await self.refresh()
                await self._send_pending()
            except LAYER_ERRORS as exc:
                self._outage(exc)
            except Exception:  # noqa: BLE001 - a bug here must not end live push for good
                log.exception("live publisher failed; its queued events are dropped")
                self._queue.clear()
            await self._sleep(next_poll)

    async def _subscribed_since(self) -> bool:
        """Whether a socket subscribed since the last read (never polled during an outage:
        the refresh interval paces the retries)."""
        if self.down:
            return False
        async with asyncio.timeout(2 * interest.TIMEOUT_S):
            version = await interest.version()
        return version != self._version

    async def _sleep(self, until: float) -> None:
        if self._fleet:
            until = min(until, self._fleet_sent + self.fleet_every_s)
        self._wake.clear()
        if self._queue:
            return
        # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow the cancellation
        # that stop() sends.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, until - time.monotonic())):
                await self._wake.wait()

    async def refresh(self) -> None:
        """Re-read which groups are watched; this is also how an outage ends."""
        try:
            async with asyncio.timeout(2 * interest.TIMEOUT_S):
                version, groups = await interest.watched()
        except LAYER_ERRORS as exc:
            self._outage(exc)
            return
        if self.down:
            self.down = False
            log.warning("live push resumed: the channel layer answers again")
        self._version = version
        self._watch(groups)

    def _watch(self, groups: frozenset[str]) -> None:
        ids: dict[str, set[int]] = {"host": set(), "engine": set()}
        for group in groups:
            kind, _, ident = group.partition(".")
            if kind in ids and ident.isdigit():
                ids[kind].add(int(ident))
        self._hosts, self._engines = frozenset(ids["host"]), frozenset(ids["engine"])
        self._fleet_on = FLEET in groups
        if not self._fleet_on:
            self._fleet.clear()

    def _outage(self, exc: BaseException) -> None:
        self._watch(frozenset())
        self._queue.clear()
        if not self.down:
            self.down = True
            log.warning("live push paused: the channel layer is unreachable (%s: %s); ingest "
                        "goes on, live push resumes when it answers", type(exc).__name__, exc)

    async def _send_pending(self) -> None:
        while self._queue:
            jobs = [self._queue.popleft() for _ in range(min(SEND_CHUNK, len(self._queue)))]
            await _send([self._event(job) for job in jobs])
        if self._fleet and time.monotonic() - self._fleet_sent >= self.fleet_every_s:
            latest, self._fleet = self._fleet, {}
            self._fleet_sent = time.monotonic()
            event = fleet_event({host: rows for host, (_, rows) in latest.items()})
            await _send([(FLEET, encode(event))])

    def _event(self, job: Job) -> tuple[str, str]:
        kind, ident, payload = job
        if kind == "host":
            return host_group(ident), encode(host_event(ident, payload))
        return engine_group(ident), encode(engine_event(ident, payload, self._bounds_of))

    def _bounds_of(self, layout_id: int) -> tuple | None:
        bounds = self._bounds.get(layout_id)
        if bounds is None:  # a layout new since the last inversion
            self._bounds = {i: b for b, i in self.layouts.items()}
            bounds = self._bounds.get(layout_id)
        return bounds


async def _send(events: list[tuple[str, str]]) -> None:
    """Publish concurrently; the first error is raised once all have finished."""
    async with asyncio.timeout(SEND_TIMEOUT_S):
        results = await asyncio.gather(*(publish(g, text) for g, text in events),
                                       return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
