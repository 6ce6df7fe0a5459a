"""``POST /api/v1/ingest`` as a bare ASGI app, outside Django's request cycle (see asgi.py).

Per request: size limit, gzip, JSON (msgspec for protocol v2; orjson for the deprecated v1),
token -> host, validation against the catalog, inventory, the batch's columns per table
(tables.py), then the shared writer; the reply comes only after the rows are committed.

Load shedding: a request that arrives while the writer holds more than INGEST_MAX_QUEUED_ROWS
rows, while INGEST_MAX_REQUESTS_IN_FLIGHT requests are being handled, or while the writer is
stuck on a database that does not answer, is answered 503 with Retry-After at once, before its
body is read: reading and parsing bodies is where the CPU and the memory go, so a backlog
costs neither. The agent spools the batch and sends it again later (docs/protocol.md).
Only requests whose bodies have arrived count as in flight: bodies still arriving have their
own bound, a deadline, and a limit per host (admission.py), so one token's slow bodies cannot
take every place.
What else is fed the committed rows (the live publisher) is attached where the application is
assembled (``IngestApp.listen``, controlplane/asgi.py): telemetry knows no layer above it.

Each reply asks its agent to hold its samples ``AGENT_HOLD_S`` and send them as one batch
(``hold_s``): the server's work is per batch as much as per value. A host that someone watches
(``IngestApp.watch_with``: the live publisher knows which hosts and engines pages show) is
asked for each sample at once, ``hold_s`` 0, so its page stays live to the second.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Collection, Sequence
from typing import Protocol

import orjson
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, connections

from agents.protocol import PROTOCOLS_HEADER
from controlplane.telemetry import partitions
from controlplane.telemetry.ingest import columns, metrics, trace
from controlplane.telemetry.ingest.admission import Admission
from controlplane.telemetry.ingest.body import BodyLimits, read_body
from controlplane.telemetry.ingest.copy import dsn_from_settings
from controlplane.telemetry.ingest.credentials import TokenRefused
from controlplane.telemetry.ingest.errors import BadRequest
from controlplane.telemetry.ingest.registry import Registry
from controlplane.telemetry.ingest.rows import LayoutCache, build_tables, engines_seen
from controlplane.telemetry.ingest.validate import Batch, parse_request
from controlplane.telemetry.ingest.writer import (
    StorageUnavailable,
    Work,
    Writer,
    due,
    new_incident,
)

log = logging.getLogger(__name__)
# Every reply names the protocol versions this server accepts: agents switch to v2 on seeing it.
JSON_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-store"),
                (PROTOCOLS_HEADER.lower().encode(), b"1, 2")]
# Why a request was shed (its 503's "shed" and the metric's label) -> the reply's words.
SHED_REASONS = {
    "queue": "overloaded: too many rows wait for the database",
    "requests": "overloaded: too many requests in progress",
    "reading": "overloaded: too many request bodies arriving",
    "stalled": "overloaded: the database is not answering",
}


class CommitListener(Protocol):
    """Something fed what each flush committed, started and stopped with the ingest app."""

    def on_commit(self, work: Sequence[Work]) -> None:
        """Runs in the writer's flush, after the commit; must not block (no I/O)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class HostWatcher(Protocol):
    """Something that knows which hosts a person watches live (the live publisher)."""

    def watches_host(self, host_id: int, engine_ids: Collection[int]) -> bool:
        """Whether a page shows this host or one of its engines now; no I/O."""


class Shed(Exception):
    """Shed after the door (a SHED_REASONS key): answered like a shed at the door."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class IngestApp:
    def __init__(self) -> None:
        conf = settings.PITWALL
        self.body_limits = BodyLimits(conf["INGEST_MAX_BODY_BYTES"],
                                      conf["INGEST_BODY_TIMEOUT_S"],
                                      conf["INGEST_JSON_BYTES_PER_CONTAINER"])
        self.retry_after_s = conf["INGEST_RETRY_AFTER_S"]  # a 503's Retry-After
        self.max_queued_rows = conf["INGEST_MAX_QUEUED_ROWS"]
        self.max_in_flight = conf["INGEST_MAX_REQUESTS_IN_FLIGHT"]
        self.in_flight = 0  # requests whose bodies arrived, not answered yet
        self.admission = Admission(conf["INGEST_MAX_REQUESTS_PER_HOST"],
                                   conf["INGEST_MAX_BODIES_READING"])
        self.writer = Writer(
            dsn_from_settings(connections.databases["default"]),
            conf["INGEST_FLUSH_ROWS"], conf["INGEST_FLUSH_MS"], conf["INGEST_FLUSH_TIMEOUT_S"])
        self.registry = Registry()
        self.layouts = LayoutCache()
        self.listeners: list[CommitListener] = []
        self.hold_s = conf["AGENT_HOLD_S"]  # what a reply asks of an agent nobody watches
        self.watchers: list[HostWatcher] = []
        self.started = False
        self.trace = trace.from_environment()
        self.writer.trace = self.trace

    @property
    def max_body(self) -> int:
        return self.body_limits.max_bytes

    def listen(self, listener: CommitListener) -> None:
        """Feed ``listener`` the batches each flush committed (the writer's after-commit hook)
        and start and stop it with this app. Attach before the app starts."""
        self.listeners.append(listener)
        self.writer.after_commit.append(listener.on_commit)

    def watch_with(self, watcher: HostWatcher) -> None:
        """Ask the agents of the hosts ``watcher`` says are watched for each sample at once."""
        self.watchers.append(watcher)

    def hold_for(self, host_id: int) -> float:
        """The ``hold_s`` a reply to this host carries: none while a page watches it."""
        if self.hold_s and self.watchers:
            engines = self.registry.engine_ids(host_id)
            if any(watcher.watches_host(host_id, engines) for watcher in self.watchers):
                return 0.0
        return self.hold_s

    async def startup(self) -> None:
        if not self.started:
            self.started = True
            await self.writer.start()
            for listener in self.listeners:
                await listener.start()
            try:
                await self.registry.warm()
            except DatabaseError as exc:  # requests load what they need once it is back
                log.warning("ingest could not preload tokens and hosts: %s", exc)
            _tune_gc()
            if self.trace is not None:
                self.trace.start()

    async def shutdown(self) -> None:
        if self.started:
            self.started = False
            await self.writer.stop()  # the last flush still reaches the listeners
            for listener in self.listeners:
                await listener.stop()
            if self.trace is not None:
                self.trace.stop()
        # The registry's ORM calls ran in asgiref's sync thread: close its connection too.
        await sync_to_async(connections.close_all)()

    async def __call__(self, scope, receive, send) -> None:
        if scope["method"] != "POST":
            await _reply(send, 405, {"error": "use POST"}, [(b"allow", b"POST")])
            return
        await self.startup()  # servers without lifespan support start the writer here
        shed = self._shed_reason()
        if shed is not None:
            await self._shed(send, shed)
            return
        await self._answer(scope, receive, send)

    def _shed_reason(self) -> str | None:
        """Why a request is refused at the door (a SHED_REASONS key), or None."""
        if self.in_flight >= self.max_in_flight:
            return "requests"
        if self.writer.queued_rows > self.max_queued_rows:
            return "queue"
        if self.writer.stuck:
            return "stalled"
        return None

    async def _shed(self, send, reason: str) -> None:
        """503 + Retry-After (a shed at the door leaves the body unread: the server discards
        it): nothing is stored."""
        metrics.count_shed(reason)
        self.writer.hurry()
        await _reply(send, 503, {
            "error": f"{SHED_REASONS[reason]}, retry after {self.retry_after_s} s",
            "reason": "overloaded", "shed": reason},
            [(b"retry-after", str(self.retry_after_s).encode())])

    async def _answer(self, scope, receive, send) -> None:
        steps = [time.monotonic()] if self.trace is not None else None
        batches = [1]  # how many the body holds, once parsed (a refusal before: one)
        extra: list[tuple[bytes, bytes]] = []
        try:
            status, body = 200, await self._handle(scope, receive, steps, batches)
        except Shed as exc:
            await self._shed(send, exc.reason)
            return
        except BadRequest as exc:
            # ``reason`` (clock, retention, invalid, ...) lets an agent tell a batch it must
            # drop from one that a later clock will accept (docs/protocol.md).
            status, body = exc.status, {"error": exc.message, "field": exc.field,
                                        "reason": exc.reason}
            if status == 429:  # the host's other requests end soon: the agent waits, resends
                extra = [(b"retry-after", str(self.retry_after_s).encode())]
            metrics.count_refused(exc.reason, batches[0])
        except (StorageUnavailable, DatabaseError) as exc:
            status, body = 503, _unavailable(exc)
            extra = [(b"retry-after", str(self.retry_after_s).encode())]
            metrics.count_unavailable(batches[0])
        await _reply(send, status, body, extra)
        if steps is not None and len(steps) == 6:
            self.trace.request((*steps, time.monotonic()))  # type: ignore[union-attr]

    async def _handle(self, scope, receive, steps: list[float] | None = None,
                      batches: list[int] | None = None) -> dict:
        headers = dict(scope["headers"])
        credential = await self.registry.authenticate(headers.get(b"authorization"))
        host_id, token_id = credential.host_id, credential.token_id
        with self.admission.host(host_id):
            if self.admission.reading_full():
                raise Shed("reading")
            with self.admission.body():
                raw = await read_body(headers, receive, self.body_limits)
            if self.in_flight >= self.max_in_flight:
                raise Shed("requests")
            self.in_flight += 1
            try:
                return await self._process(raw, host_id, token_id, steps, batches)
            finally:
                self.in_flight -= 1

    async def _process(self, raw: bytes, host_id: int, token_id: int,
                       steps: list[float] | None, batches: list[int] | None) -> dict:
        """A body that has arrived: parsed, checked, placed, written; the reply's body."""
        if steps is not None:
            steps.append(time.monotonic())
        parsed = columns.parse(raw)  # protocol 2; None: a v1 body
        if parsed is None:
            try:
                parsed = parse_request(orjson.loads(raw))
            except orjson.JSONDecodeError as exc:
                raise BadRequest(f"the body is not valid JSON: {exc}") from None
        if batches is not None:
            batches[0] = len(parsed.batches)
        self._check_times(parsed.batches)
        if steps is not None:
            steps.append(time.monotonic())
        # Read (at most every CONFIG_TTL_S) before the batches are placed: the same reload
        # drops cached devices of hosts an administrator changed (inventory.move_gpu).
        version = await self.registry.config_version(host_id)
        try:
            # Each write below checks the token again, in its own transaction.
            await self.layouts.resolve(host_id, parsed.batches, token_id)
            work = [await self._work(host_id, token_id, batch) for batch in parsed.batches]
            if steps is not None:
                steps.append(time.monotonic())
            new = await self.writer.submit(work)
            if steps is not None:
                steps.extend((work[0].flush_started, max(w.committed for w in work)))
        except TokenRefused as exc:
            self.registry.refuse(exc.token_id, exc.message)
            raise
        accepted = sum(b.sample_count for b, is_new in zip(parsed.batches, new, strict=True)
                       if is_new)
        metrics.count_answered(new)
        return {"accepted": accepted, "duplicates": new.count(False), "config_version": version,
                "hold_s": self.hold_for(host_id), "ignored": sorted(parsed.ignored)}

    async def _work(self, host_id: int, token_id: int, batch: Batch) -> Work:
        state = await self.registry.prepare(host_id, batch, token_id)
        now = time.monotonic()
        touch_host = due(state.last_seen_written, now)
        if touch_host:
            state.last_seen_written = now
        touch_engines = []
        for engine_id in engines_seen(state, batch):
            if due(state.engines_seen_written.get(engine_id, 0.0), now):
                state.engines_seen_written[engine_id] = now
                touch_engines.append(engine_id)
        return Work(
            host_id=host_id, boot_id=batch.boot_id, seq=batch.seq,
            agent_version=batch.agent_version,
            tables=build_tables(state, batch, self.layouts.ids),
            days={partitions.day_of(ts) for ts in batch.timestamps()},
            evicted_batches=batch.evicted_batches, evicted_samples=batch.evicted_samples,
            touch_host=touch_host, touch_engines=tuple(touch_engines), token_id=token_id)

    def _check_times(self, batches: list[Batch]) -> None:
        """Each ts within what is retained: not older than the raw retention (it would only
        make partitions that maintenance drops), not further ahead than the allowed skew."""
        oldest, newest = partitions.raw_ts_range()
        for batch in batches:
            times = batch.timestamps()
            if times and oldest <= min(times) and max(times) <= newest:
                continue  # min and max loop in C; the loop below only names the bad one
            for i, ts in enumerate(times):
                if ts > newest:
                    raise BadRequest(
                        f"ts is {ts - time.time():.0f} s in the future; check the "
                        f"agent's clock (NTP)", batch.ts_field(i), reason="clock")
                if ts < oldest:
                    days = settings.PITWALL["RAW_RETENTION_DAYS"]
                    raise BadRequest(
                        f"ts is {(time.time() - ts) / 86400:.1f} days old, older than the raw "
                        f"retention ({days} days): it would never be kept; check the agent's "
                        f"clock (NTP)", batch.ts_field(i), reason="retention")


def _unavailable(exc: Exception) -> dict:
    """The 503's body: retry later, and an id to find the details in the server's log.

    The database's error text (host, port, user, database) stays in the log: it tells an
    agent, or whoever holds its token, about the inside of the control plane.
    """
    incident = getattr(exc, "incident", "")
    if not incident:  # not logged yet (the writer logs its flush failures itself)
        incident = new_incident()
        log.warning("ingest answered 503 [incident %s]: %s: %s", incident,
                    type(exc).__name__, exc)
    return {"error": f"storage unavailable, retry later (incident {incident})",
            "correlation_id": incident}


def _tune_gc() -> None:
    """Fewer, cheaper cyclic-GC passes for a process that ingests.

    Each request allocates thousands of short-lived, acyclic objects (the parsed batch), which
    reference counting frees; Python's default collector still runs every 700 allocations and
    now and then walks the whole heap (Django, caches). Freezing what exists at start and
    raising the first threshold cut the ingest benchmark's p99 from ~295 ms to 180-210 ms at
    1,000 batches/s (BENCHMARKS.md); cyclic garbage is still collected.
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


async def _reply(send, status: int, body: dict, extra: list | None = None) -> None:
    payload = orjson.dumps(body)
    headers = [*JSON_HEADERS, (b"content-length", str(len(payload)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
