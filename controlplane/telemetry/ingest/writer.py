"""The ingest writer: batches rows across concurrent requests into one COPY transaction.

docs/architecture.md: binary COPY measured 7.4 k rows/s with one agent batch (8 rows) per
transaction and 82-133 k rows/s with 800-8,000 rows: so requests hand their rows to this
writer and wait; it flushes whatever has gathered (group commit) when ``flush_rows`` rows wait
or ``flush_ms`` passed since the first, in one transaction, and only then are the requests
answered. Nothing is acknowledged before it is committed, so a crash loses nothing the agent
believes stored.

Credentials: the flush reads the state of the agent tokens its batches came with, first thing in
its transaction (one query); the batches of a token revoked or expired by then are refused with
TokenRefused and none of their rows is stored (credentials.py).

Idempotency: each agent boot is a stream with the highest seq stored (AgentStream). The flush
locks the streams it touches (``FOR UPDATE``, in key order), stores only batches above that
seq and raises it, all in the same transaction: a replay racing its original, in this process
or another, is stored once.

A stalled database (a server that holds its connections open and answers nothing: SIGSTOP, a
dead disk) must not hold requests forever: a flush that has not committed within
``flush_timeout_s`` is abandoned. Its batches are answered 503 (nothing was acknowledged; if
the server does commit the abandoned transaction later, the replay is a duplicate by the claim
above), its connection is dropped without a word to the server (a cancel request or a polite
close would wait on it too), and until a new connection answers the writer is ``stalled``:
new batches are refused at once (the app sheds their requests at the door, app.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from psycopg import errors as pg_errors

from controlplane.telemetry import partitions
from controlplane.telemetry.ingest import credentials, metrics
from controlplane.telemetry.ingest.copy import copy_table, make_copy_connection
from controlplane.telemetry.ingest.credentials import TokenRefused
from controlplane.telemetry.ingest.errors import BadRequest
from controlplane.telemetry.ingest.tables import TableColumns, Tables, concat
from controlplane.telemetry.rollups import late

log = logging.getLogger(__name__)
LAST_SEEN_EVERY_S = 5.0  # last_seen is refreshed at most this often per host / engine
# While stalled, the writer tries a new connection this often (each waits up to the timeout).
RECONNECT_EVERY_S = 1.0
# A request of this many batches or more is a spool replay: its agent sends the next group only
# after this one's reply, so the group is flushed at once. Fewer batches (what queued in an
# agent during a slow second) join the group commit as a single batch does: flushing each such
# request at once turned one COPY per ~4,000 rows into one per request or two, and PostgreSQL's
# CPU per value went from 0.72 to 2.69 at 500 two-batch requests/s.
REPLAY_GROUP_BATCHES = 10
# An abandoned flush, its socket shut down, normally ends at once; past this it is cancelled.
ABANDON_GRACE_S = 1.0


@dataclass
class Work:
    """One batch of one request, waiting for a flush."""

    host_id: int
    boot_id: uuid.UUID
    seq: int
    agent_version: str
    tables: Tables  # its rows per table, column by column, as COPY encodes them
    days: set
    evicted_batches: int = 0
    evicted_samples: int = 0
    touch_host: bool = False  # refresh the host's last_seen in this flush
    touch_engines: tuple[int, ...] = ()
    token_id: int | None = None  # the agent token it came with; None: not checked (internal)
    future: asyncio.Future = field(default=None)  # type: ignore[assignment]
    flush_started: float = 0.0  # monotonic instants, for the timing trace (trace.py)
    committed: float = 0.0

    @property
    def row_count(self) -> int:
        return sum(t.length for t in self.tables.values())

    @functools.cached_property
    def rows(self) -> dict[str, list[tuple]]:
        """Row tuples per table, built on first use: for what is fed committed batches as
        rows (the live publisher, while someone watches); the writer itself never asks."""
        return {name: table.rows() for name, table in self.tables.items()}


class OutsideWindow(BadRequest):
    """A batch with samples of a day outside the retained range: refused, never partitioned.

    The request checks refuse such samples first (app.py); this is the writer's own guard,
    and catches a batch checked just before midnight whose oldest day left retention since.
    """

    reason = "retention"


class StorageUnavailable(Exception):
    """The database could not take the flush; nothing of it was stored.

    ``incident`` names the log line with the details (the database's own error text names
    hosts and users: it is logged here, never sent to the agent).
    """

    def __init__(self, message: str, incident: str = "") -> None:
        super().__init__(message)
        self.incident = incident


class FlushTimeout(StorageUnavailable):
    """A flush that did not commit within the flush timeout: abandoned, nothing acknowledged."""


class Writer:
    def __init__(self, dsn: str, flush_rows: int, flush_ms: int,
                 flush_timeout_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dsn = dsn
        self.clock = clock  # when a batch arrived and when its flush is due
        self.flush_rows = flush_rows
        self.flush_s = flush_ms / 1000
        self.flush_timeout_s = flush_timeout_s
        self._pending: list[Work] = []
        self._pending_rows = 0
        self._flushing_rows = 0  # the rows of the flush in progress
        self._flush_began: float | None = None  # monotonic, while a flush runs
        # True from an abandoned flush until a new connection answers (RECONNECT_EVERY_S).
        self.stalled = False
        self._stalled_since = 0.0
        self.failed_reconnects = 0  # attempts that gave up, since the start
        self._abandoned: set[asyncio.Task] = set()  # flushes cancelled, not yet ended
        self._oldest = 0.0  # when the oldest pending batch arrived (self.clock)
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._conn: psycopg.AsyncConnection | None = None
        self._task: asyncio.Task | None = None
        self._known_days: set = set()
        self._stopping = False
        self.after_commit: list = []  # callables(list[Work]) run after each commit
        self.trace = None  # a trace.Trace while PITWALL_INGEST_TRACE is set
        self._steps: list[float] = []  # the current flush's phase instants, when tracing
        # The last flush's rows and values per table, counted for /metrics after its commit.
        self._stored: dict[str, tuple[int, int]] = {}

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pitwall-ingest-writer")

    async def stop(self) -> None:
        """Flush what is pending, then close: a clean shutdown loses nothing."""
        self._stopping = True
        self._wake.set()
        self._full.set()
        if self._task:
            await self._task
        if self._conn is not None:
            await self._conn.close()

    @property
    def queued_rows(self) -> int:
        """Rows waiting for a flush, and those of the flush in progress."""
        return self._pending_rows + self._flushing_rows

    @property
    def stuck(self) -> bool:
        """Stalled, or a flush running past the timeout (about to be abandoned)."""
        began = self._flush_began
        return self.stalled or (
            began is not None and time.monotonic() - began > self.flush_timeout_s)

    def hurry(self) -> None:
        """Flush what waits without waiting out the window: requests are being shed, so no
        companions will come, and the window would only cap the throughput at the requests
        allowed in flight per flush_ms."""
        if self._pending:
            self._full.set()

    async def submit(self, items: list[Work]) -> list[bool]:
        """Stores the batches; returns for each whether it was new (False: a replay)."""
        if self._stopping:
            raise StorageUnavailable("the server is shutting down")
        if self.stalled:
            raise StorageUnavailable("the database stopped answering; retry later")
        loop = asyncio.get_running_loop()
        if not self._pending:
            self._oldest = self.clock()  # its flush is due flush_ms from now
        for item in items:
            item.future = loop.create_future()
            self._pending.append(item)
            self._pending_rows += item.row_count
        metrics.QUEUE.set(len(self._pending))
        self._wake.set()
        if self._pending_rows >= self.flush_rows or len(items) >= REPLAY_GROUP_BATCHES:
            self._full.set()
        if len(items) == 1:  # a live batch: no gather (a task per request) needed
            return [await items[0].future]
        # Every outcome is collected (none left unretrieved); the first refusal is raised.
        outcomes = await asyncio.gather(*(item.future for item in items),
                                        return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return list(outcomes)

    async def _run(self) -> None:
        while not (self._stopping and not self._pending):
            if self.stalled:
                self._refuse_pending(StorageUnavailable(
                    "the database stopped answering; retry later"))
                await self._reconnect()
                continue
            await self._wake.wait()
            # Due flush_ms after the oldest waiting batch arrived, not after the previous
            # flush ended: a batch that came during a slow flush does not wait a whole
            # window more (the tail under load).
            left = self._oldest + self.flush_s - self.clock()
            if not self._stopping and left > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), left)
            work, self._pending, self._pending_rows = self._pending, [], 0
            metrics.QUEUE.set(0)
            self._wake.clear()
            self._full.clear()
            if work:
                await self._flush_and_answer(work)

    async def _flush_and_answer(self, work: list[Work]) -> None:
        work = self._within_window(work)
        if not work:
            return
        started = time.monotonic()
        self._steps = []
        self._flushing_rows = sum(w.row_count for w in work)
        self._flush_began = started
        try:
            stored = await self._flush_in_time(work)
        except Exception as exc:  # noqa: BLE001 - every failure is answered, none is stored
            incident = new_incident()
            log.warning("ingest flush of %d batches failed [incident %s]: %s", len(work),
                        incident, exc)
            await self._reset_connection()
            for item in work:
                if not item.future.done():
                    item.future.set_exception(StorageUnavailable(str(exc), incident))
            return
        finally:
            self._flushing_rows, self._flush_began = 0, None
        committed = time.monotonic()
        metrics.FLUSH_SECONDS.observe(committed - started)
        metrics.count_stored(self._stored)
        fresh = [w for w, new in zip(work, stored, strict=True) if new is True]
        for item, outcome in zip(work, stored, strict=True):
            item.flush_started, item.committed = started, committed
            if not item.future.done():
                if isinstance(outcome, TokenRefused):
                    item.future.set_exception(outcome)
                else:
                    item.future.set_result(outcome)
        for callback in self.after_commit:
            try:
                callback(fresh)
            except Exception:  # noqa: BLE001 - a live-push failure must not fail ingest
                log.exception("after-commit callback failed")
        if self.trace is not None:
            self.trace.flush((started, len(work), sum(w.row_count for w in work),
                              *self._steps, committed, time.monotonic()))

    async def _flush_in_time(self, work: list[Work]) -> list[bool | TokenRefused]:
        """``_flush``, abandoned (FlushTimeout) if it has not committed within the timeout."""
        flush = asyncio.create_task(self._flush(work), name="pitwall-ingest-flush")
        done, _ = await asyncio.wait({flush}, timeout=self.flush_timeout_s)
        if flush in done:
            return flush.result()
        self.stalled, self._stalled_since = True, time.monotonic()
        await self._abandon(flush)
        raise FlushTimeout(f"the flush did not commit within {self.flush_timeout_s:g} s; "
                           "the database is not answering")

    async def _abandon(self, flush: asyncio.Task) -> None:
        """End a flush stuck on a silent server without waiting on the server.

        Cancelling the task is not enough: psycopg answers a cancellation inside a query by
        sending the server a cancel request and waiting for it (5 s, then 5 s more), and a
        graceful close sends a Terminate message. Shutting the socket down wakes the flush
        at once with "connection lost" and nothing is sent. A flush still connecting has no
        socket here yet: its cancellation only closes the half-open one.
        """
        conn = self._conn
        if conn is not None and not conn.closed:
            _shut_down(conn)
        await asyncio.wait({flush}, timeout=ABANDON_GRACE_S)
        if not flush.done():
            flush.cancel()  # not awaited: whatever it still waits on, the writer goes on
            self._abandoned.add(flush)
            flush.add_done_callback(self._abandoned.discard)
        if flush.done() and not flush.cancelled():
            flush.exception()  # retrieved: its error is the FlushTimeout's story
        self._conn = None  # closed by _reset_connection if the flush did not already

    def _refuse_pending(self, error: StorageUnavailable) -> None:
        work, self._pending, self._pending_rows = self._pending, [], 0
        metrics.QUEUE.set(0)
        self._wake.clear()
        self._full.clear()
        for item in work:
            if not item.future.done():
                item.future.set_exception(error)

    async def _reconnect(self) -> None:
        """While stalled: a new connection every RECONNECT_EVERY_S until one answers (each
        attempt gives up after the flush timeout: psycopg's connect_timeout)."""
        while self.stalled and not self._stopping:
            try:
                self._conn = await make_copy_connection(self.dsn, self._connect_timeout())
            except (psycopg.Error, OSError) as exc:
                self.failed_reconnects += 1
                log.debug("ingest writer: no new connection yet: %s", exc)
                await asyncio.sleep(RECONNECT_EVERY_S)
                continue
            self.stalled = False
            log.warning("ingest writer: the database answers again after %.1f s",
                        time.monotonic() - self._stalled_since)

    def _connect_timeout(self) -> int:
        return max(2, round(self.flush_timeout_s))  # libpq's minimum is 2 s

    def _within_window(self, work: list[Work]) -> list[Work]:
        """The items whose new days may be partitioned; the others are refused here."""
        kept = []
        for item in work:
            new_days = item.days - self._known_days
            outside = new_days and partitions.outside_raw_days(new_days)
            if outside:
                if not item.future.done():
                    item.future.set_exception(OutsideWindow(
                        f"samples of {outside[0].isoformat()} are outside the retained range"))
            else:
                kept.append(item)
        return kept

    async def _connection(self) -> psycopg.AsyncConnection:
        if self._conn is None or self._conn.closed:
            self._conn = await make_copy_connection(self.dsn, self._connect_timeout())
        return self._conn

    async def _reset_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()  # non-blocking libpq: never waits on the server
        self._conn = None

    async def _flush(self, work: list[Work]) -> list[bool | TokenRefused]:
        conn = await self._connection()
        await self._ensure_partitions(conn, set().union(*(w.days for w in work)))
        try:
            return await self._flush_once(conn, work, conflict_safe=False)
        except pg_errors.UniqueViolation:
            # A sample row already stored under another stream (an agent restarted with a
            # clock that went back, a hand-replayed batch): store the rest, skip those rows.
            log.warning("ingest flush hit rows already stored; retrying without them")
            return await self._flush_once(conn, work, conflict_safe=True)

    async def _flush_once(self, conn, work: list[Work],
                          conflict_safe: bool) -> list[bool | TokenRefused]:
        """Per item: True stored, False a replay already stored, or why its token is refused."""
        async with conn.transaction():
            refused = await self._refused_tokens(conn, work)
            allowed = [w for w in work if w.token_id not in refused] if refused else work
            new = await self._claim(conn, allowed) if allowed else []
            self._steps.append(time.monotonic())
            fresh = [w for w, is_new in zip(allowed, new, strict=True) if is_new]
            tables: dict[str, list[TableColumns]] = {}
            for item in fresh:
                for name, table in item.tables.items():
                    if table.length:
                        tables.setdefault(name, []).append(table)
            self._stored = {}
            for name, parts in tables.items():
                table = concat(parts)
                values = await copy_table(conn, table, conflict_safe)
                self._stored[name] = (table.length, values)
            self._steps.append(time.monotonic())
            await self._count_evictions(conn, fresh)
            await late.record(conn, fresh)  # rollups redo the minutes late samples reached
        if not refused:
            return new
        outcome = dict(zip(map(id, allowed), new, strict=True))
        return [TokenRefused(w.token_id, refused[w.token_id]) if w.token_id in refused
                else outcome[id(w)] for w in work]

    @staticmethod
    async def _refused_tokens(conn, work: list[Work]) -> dict[int, str]:
        """Token id -> why, for the tokens of this flush revoked, expired or deleted by now."""
        ids = sorted({w.token_id for w in work if w.token_id is not None})
        if not ids:
            return {}
        async with conn.cursor() as cur:
            await cur.execute(credentials.STATE_SQL, (ids,))
            return credentials.refusals(ids, await cur.fetchall())

    async def _claim(self, conn, work: list[Work]) -> list[bool]:
        """Which batches are new; raises each stream's seq and refreshes last_seen (one trip)."""
        streams: dict[tuple[int, uuid.UUID], tuple[int, str]] = {}
        for item in work:
            key = (item.host_id, item.boot_id)
            top = streams.get(key, (0, ""))[0]
            streams[key] = (max(top, item.seq), item.agent_version)
        keys = sorted(streams)
        seen_hosts = sorted({w.host_id for w in work if w.touch_host})
        seen_engines = sorted({e for w in work for e in w.touch_engines})
        async with conn.cursor() as cur:
            await cur.execute(
                "SELECT host_id, boot_id, previous FROM pitwall_claim_streams("
                "%s::int[], %s::uuid[], %s::int8[], %s::text[], %s::int[], %s::int[])",
                ([k[0] for k in keys], [k[1] for k in keys], [streams[k][0] for k in keys],
                 [streams[k][1] for k in keys], seen_hosts, seen_engines))
            high = {(h, b): previous for h, b, previous in await cur.fetchall()}
        new = {}
        for item in sorted(work, key=lambda w: w.seq):
            key = (item.host_id, item.boot_id)
            new[id(item)] = item.seq > high[key]
            high[key] = max(high[key], item.seq)
        return [new[id(item)] for item in work]

    async def _count_evictions(self, conn, fresh: list[Work]) -> None:
        """Spool evictions the agents reported, counted once: only from batches stored now."""
        hosts: dict[int, tuple[int, int]] = {}
        for item in fresh:
            if item.evicted_batches or item.evicted_samples:
                b, s = hosts.get(item.host_id, (0, 0))
                hosts[item.host_id] = (b + item.evicted_batches, s + item.evicted_samples)
        if not hosts:
            return
        ids = sorted(hosts)
        async with conn.cursor() as cur:
            await cur.execute(
                "UPDATE fleet_host h SET"
                " spool_evicted_batches = spool_evicted_batches + v.b,"
                " spool_evicted_samples = spool_evicted_samples + v.s"
                " FROM unnest(%s::int[], %s::int8[], %s::int8[]) AS v(id, b, s)"
                " WHERE h.id = v.id",
                (ids, [hosts[i][0] for i in ids], [hosts[i][1] for i in ids]))

    async def _ensure_partitions(self, conn, days: set) -> None:
        missing = days - self._known_days
        if not missing:
            return
        async with conn.transaction(), conn.cursor() as cur:
            await cur.execute(partitions.ADVISORY_LOCK_SQL)
            for stmt in partitions.create_on_demand_sql(missing):
                await cur.execute(stmt)
        self._known_days |= missing


def _shut_down(conn: psycopg.AsyncConnection) -> None:
    """Shut the connection's socket down (both ways) without closing its descriptor, which
    psycopg still owns: whatever waits on it wakes with an error, and nothing is sent."""
    with contextlib.suppress(OSError, psycopg.Error):
        fd = conn.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as dup:
            dup.shutdown(socket.SHUT_RDWR)


def new_incident() -> str:
    """A short id that ties a 503 to the log line holding its details."""
    return uuid.uuid4().hex[:16]


def due(last_written: float, now: float | None = None) -> bool:
    return (now or time.monotonic()) - last_written >= LAST_SEEN_EVERY_S
