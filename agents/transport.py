"""Delivery to ``POST /api/v1/ingest``: a keep-alive HTTP client and a sender thread.

The collection loop hands each batch to ``Shipper.submit`` and never waits on the network. The
sender keeps recent batches in memory while the server answers; on the first failure they move,
in order, to the on-disk spool, and from then on new batches queue on disk behind them until a
replay (several batches per request) drains it. Replies follow docs/protocol.md: a failure is
retried with exponential backoff and full jitter, and never sooner than the server's
``Retry-After``; a batch refused for a timestamp ahead of the server's clock waits in the spool
until the server's clock reaches it (``ClockWatch``).
"""

from __future__ import annotations

import gzip
import http.client
import json
import math
import random
import re
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import SplitResult, urlsplit

from agents import __version__
from agents.collectors.base import Warn, WarnOnce, stderr_warn
from agents.protocol import (
    COLUMNS_VERSION,
    INGEST_PATH,
    PROTOCOL_VERSION,
    PROTOCOLS_HEADER,
    as_columns,
    from_columns,
)
from agents.spool import REPLAY_MAX_BATCHES, Batch, Spool, Spooled, encode, join_batches

PERMANENT = frozenset({400, 413, 415})  # the same bytes can never be accepted: drop them
BAD_TOKEN = frozenset({401, 403})  # an operator must fix the token: keep the data meanwhile
_BATCH_INDEX = re.compile(r"^batches\[(\d+)\]")
_STALE = (ConnectionResetError, BrokenPipeError)  # includes http.client.RemoteDisconnected
# A server's Retry-After is honoured up to this: a wrong header must not silence an agent for
# a day (the spool is bounded; batches would be evicted meanwhile).
RETRY_AFTER_CAP_S = 300.0
# A host whose clock differs from the server's by more than this is told so, once.
CLOCK_SKEW_WARN_S = 60.0


@dataclass(frozen=True)
class Reply:
    status: int  # 0 when no HTTP answer came back (refused, timeout, reset)
    body: dict[str, Any] = field(default_factory=dict)
    problem: str = ""  # why there was no answer
    retry_after: float | None = None  # seconds, from the Retry-After header
    server_time: float | None = None  # the server's clock, from the Date header (1 s steps)
    received_at: float = 0.0  # this host's clock when the answer came

    @property
    def clock_refusal(self) -> bool:
        """A timestamp ahead of the server's clock: acceptable later, not malformed."""
        return self.status == 400 and self.body.get("reason") == "clock"

    @property
    def skew(self) -> float | None:
        """How far this host's clock is ahead of the server's (negative: behind)."""
        if self.server_time is None:
            return None
        # Date has whole seconds, truncated: the server's clock was half a second past it.
        return self.received_at - (self.server_time + 0.5)

    def describe(self) -> str:
        if not self.status:
            return f"unreachable ({self.problem})"
        detail = self.body.get("error") or http.client.responses.get(self.status, "")
        where = f" (field {self.body['field']})" if self.body.get("field") else ""
        return f"answered {self.status}: {detail}{where}"


def server_url(server: str) -> SplitResult:
    """The control plane's base URL, checked: http(s)://host[:port][/path]."""
    url = urlsplit(server)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"server URL must be http(s)://host[:port], got {server!r}")
    return url


def connect(url: SplitResult, timeout: float) -> http.client.HTTPConnection:
    """A connection to the server (not opened yet); HTTPS verifies certificates the default
    way."""
    host, port = url.hostname or "", url.port
    if url.scheme == "https":
        return http.client.HTTPSConnection(host, port, timeout=timeout,
                                           context=ssl.create_default_context())
    return http.client.HTTPConnection(host, port, timeout=timeout)


class IngestClient:
    """One persistent connection to the server.

    Batches go out as protocol v2 (columns, cheaper for the server to check), spooled ones
    as the bytes read from disk, once the server's replies announce it
    (``Pitwall-Protocols: 1, 2``). Until then, and to a server that does not, they are
    converted back to the deprecated v1 (``from_columns``).
    """

    def __init__(self, server: str, token: str, timeout: float = 10.0) -> None:
        url = server_url(server)
        self._url = url
        self.path = url.path.rstrip("/") + INGEST_PATH
        self.origin = f"{url.scheme}://{url.netloc.rpartition('@')[2]}"
        self._headers = {
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            "Authorization": f"Bearer {token}",
            "User-Agent": f"pitwall-agent/{__version__}",
        }
        self._timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self.protocol = PROTOCOL_VERSION  # what live batches are sent as

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = connect(self._url, self._timeout)
        return self._conn

    def post(self, payload: Batch | bytes) -> Reply:
        """``payload``: a batch (either protocol), or a v2 replay body already encoded as JSON.
        Replays are large and CPU-bound, so they are compressed fast; one live batch is
        compressed harder."""
        columns = self.protocol == COLUMNS_VERSION
        reply = self._post(payload, columns)
        if columns and reply.status == 400 and reply.body.get("field") == "protocol":
            # A server that no longer speaks v2 (rolled back): v1 from now on, this batch too.
            self.protocol = PROTOCOL_VERSION
            reply = self._post(payload, False)
        return reply

    def _post(self, payload: Batch | bytes, columns: bool) -> Reply:
        if isinstance(payload, bytes):
            body = gzip.compress(payload if columns else _as_rows_json(payload),
                                 compresslevel=1, mtime=0)
        else:
            batch = as_columns(payload) if columns else from_columns(payload)
            body = gzip.compress(encode(batch), compresslevel=5, mtime=0)
        reused = self._conn is not None
        try:
            try:
                return self._exchange(body)
            except _STALE:
                # A kept-alive connection the server closed while idle fails on first use;
                # ingest is idempotent, so one immediate retry on a fresh connection is safe.
                if not reused:
                    raise
                return self._exchange(body)
        except (OSError, http.client.HTTPException) as exc:
            return Reply(0, problem=f"{type(exc).__name__}: {exc}")

    def _exchange(self, body: bytes) -> Reply:
        try:
            conn = self._connection()
            conn.request("POST", self.path, body=body, headers=self._headers)
            response = conn.getresponse()
            raw = response.read()
        except BaseException:
            self.close()
            raise
        if response.will_close:
            self.close()
        announced = {v.strip() for v in (response.getheader(PROTOCOLS_HEADER) or "").split(",")}
        self.protocol = COLUMNS_VERSION if str(COLUMNS_VERSION) in announced else PROTOCOL_VERSION
        try:
            body = json.loads(raw)
        except ValueError:  # a proxy's HTML error page, an empty body
            body = {}
        received_at = time.time()
        server_time = _http_date(response.getheader("Date"))
        return Reply(response.status, body if isinstance(body, dict) else {},
                     retry_after=_retry_after(response.getheader("Retry-After"), server_time,
                                              received_at),
                     server_time=server_time, received_at=received_at)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class ClockWatch:
    """Says, once per state, what the server's replies show of this host's clock.

    The server refuses a sample more than its allowed skew (``PITWALL_MAX_CLOCK_SKEW_S``) ahead
    of its own clock with reason ``clock``; the shipper keeps such batches spooled until the
    server's clock reaches them. A skew the server accepts (this host behind, or ahead by less
    than the limit) costs nothing but is said too: the samples are stored at this host's times.
    The skew is measured from the reply's Date header (whole seconds).
    """

    def __init__(self, warn: Warn) -> None:
        self._state = WarnOnce(warn)
        self._said: str | None = None  # "refused" | "skewed" | None (fine)

    def observe(self, reply: Reply, after_cut: bool = False) -> None:
        """``after_cut``: a success while batches a clock refusal held back still wait."""
        if reply.clock_refusal:
            if reply.skew is not None and abs(reply.skew) < CLOCK_SKEW_WARN_S:
                # Batches made before this host's clock was set right (a restart after NTP).
                why = ("they were made while this host's clock was ahead (it now agrees with "
                       "the server's)")
            else:
                why = f"{_describe_skew(reply.skew)}: check NTP here and on the server"
            self._say("refused", f"the server refuses samples as too far in the future: {why}; "
                      "they stay spooled and are sent once the server's clock reaches them")
            return
        if not 200 <= reply.status < 300 or after_cut or reply.skew is None:
            return
        if abs(reply.skew) > CLOCK_SKEW_WARN_S:
            self._say("skewed", f"{_describe_skew(reply.skew)}; samples are stored at this "
                      "host's times: check NTP here and on the server")
        elif abs(reply.skew) < CLOCK_SKEW_WARN_S / 2 and self._said is not None:
            self._said = None  # half the threshold: a skew near it does not flap
            self._state.ok("clock")

    def _say(self, state: str, message: str) -> None:
        if self._said != state:  # the measured skew moves a little: said once per state
            self._said = state
            self._state.fail("clock", message)


def _describe_skew(skew: float | None) -> str:
    if skew is None:
        return "the server's clock is behind this host's (it sent no Date header)"
    side = "ahead of" if skew > 0 else "behind"
    return f"this host's clock is about {abs(skew):.0f} s {side} the server's"


class Shipper:
    """Sends batches in order, spools them while the server is away, replays them on return."""

    def __init__(self, client: IngestClient, spool: Spool, *,
                 inventory: Callable[[], Batch | None] = lambda: None,
                 on_inventory_needed: Callable[[], None] = lambda: None,
                 warn: Warn = stderr_warn, sleep: Callable[[float], object] | None = None,
                 rand: Callable[[], float] = random.random, backoff_base: float = 0.5,
                 backoff_cap: float = 30.0, memory_limit: int = 60) -> None:
        self.client = client
        self.spool = spool
        self._inventory = inventory
        self._on_inventory_needed = on_inventory_needed
        self._warn = warn
        self._state = WarnOnce(warn)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._sleep = sleep or self._stop.wait  # backoff ends early on shutdown
        self._rand = rand
        self._base, self._cap = backoff_base, backoff_cap
        self._memory_limit = memory_limit
        self._memq: deque[Batch] = deque()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._failures = 0
        self._group_limit = REPLAY_MAX_BATCHES
        self.clock = ClockWatch(warn)
        # A clock refusal came since the spool was last empty: successes meanwhile deliver
        # only what the server's clock has reached.
        self._clock_cut = False
        self.delivered_batches = 0
        self.dropped_batches = 0
        self.config_version: int | None = None
        # How long the server asks this agent to hold samples before sending them as one
        # batch (its replies' hold_s); 0 until a reply says: the first samples go at once.
        self.hold_s = 0.0

    def submit(self, batch: Batch) -> None:
        """Queue a batch; it is turned into protocol v2 here, once, and stays v2 in memory, on
        disk and on the wire."""
        batch = as_columns(batch)
        with self._lock:
            # Once anything is on disk, newer batches queue behind it there: order holds.
            if len(self.spool) or len(self._memq) >= self._memory_limit:
                self._spill()
                self.spool.append(batch)
            else:
                self._memq.append(batch)
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pitwall-sender", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 15.0) -> None:
        """Stop sending; whatever is still in memory goes to the spool for the next start."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            self._spill()
        self.client.close()

    def _spill(self) -> None:  # caller holds the lock
        while self._memq:
            self.spool.append(self._memq.popleft())

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                busy = self.step()
            except Exception as exc:  # a bug here must not end delivery without a word
                self._state.fail("sender", f"{type(exc).__name__}: {exc}; retrying")
                self._backoff()
                continue
            if not busy:
                self._wake.wait()

    def step(self) -> bool:
        """Send the next group of batches once; False when there was nothing to send."""
        group = self._next_group()
        if not group:
            return False
        evicted = self.spool.evictions()
        try:
            reply = self.client.post(self._payload(group, evicted))
            # Each 409 names one batch the server cannot place; each round adds the inventory
            # to a batch that lacked it, so this ends within len(group) rounds.
            while reply.status == 409 and self._attach_inventory(group, reply):
                reply = self.client.post(self._payload(group, evicted))
        except (TypeError, ValueError) as exc:  # a collector put something JSON cannot hold
            self._refused(group, Reply(400), f"it cannot be encoded as JSON ({exc})")
            return True
        self.clock.observe(reply, after_cut=self._clock_cut)
        if 200 <= reply.status < 300:
            self._delivered(group, reply, evicted)
        elif reply.clock_refusal:
            self._clock_refused(group, reply)
        elif reply.status == 409 and self._inventory() is None:
            self._failed(group, reply)  # no inventory collected yet: ask again shortly
        elif reply.status in PERMANENT or reply.status == 409:
            self._refused(group, reply, f"server {self.client.origin} {reply.describe()}")
        else:
            self._failed(group, reply)
        return True

    def _next_group(self) -> list[Spooled]:
        while len(self.spool):  # peek comes back empty when it only found corrupt files
            group = self.spool.peek(self._group_limit)
            if group:
                return group
        with self._lock:
            return [Spooled(None, parsed=b) for b in list(self._memq)[: self._group_limit]]

    @staticmethod
    def _payload(group: list[Spooled], evicted: tuple[int, int]) -> Batch | bytes:
        # Spooled batches travel as read, unparsed (that was most of a replay's CPU).
        batches = [item.raw if item.raw is not None else item.batch for item in group]
        if any(evicted):
            # The newest batch carries the report: an older one may be a replayed duplicate.
            last = group[-1].batch
            report = {"evicted_batches": evicted[0], "evicted_samples": evicted[1]}
            batches[-1] = {**last, "agent": {**last.get("agent", {}), "spool": report}}
        if len(batches) == 1:
            return batches[0]
        return join_batches([b if isinstance(b, bytes) else encode(b) for b in batches])

    def _attach_inventory(self, group: list[Spooled], reply: Reply) -> bool:
        self._on_inventory_needed()
        inventory = self._inventory()
        index = _batch_index(reply) or 0
        if inventory is None or index >= len(group) or "host" in group[index].batch:
            return False
        group[index].batch["host"] = inventory
        group[index].raw = None  # changed: encoded again from the parsed batch
        return True

    def _delivered(self, group: list[Spooled], reply: Reply, evicted: tuple[int, int]) -> None:
        self._forget(group)
        if any(evicted):
            self.spool.acknowledge_evictions(*evicted)
        self.delivered_batches += len(group)
        self.config_version = reply.body.get("config_version", self.config_version)
        self.hold_s = asked_hold(reply.body)
        # After a clock refusal, a success is the part the server's clock had reached; while
        # more waits behind it (likely refused again) the backoff goes on. The next group is
        # still tried at once.
        if not (self._clock_cut and (len(self.spool) or self._memq)):
            self._clock_cut = False
            self._failures = 0
        self._group_limit = min(REPLAY_MAX_BATCHES, self._group_limit * 2)
        self._state.ok(f"server {self.client.origin}")
        self._state.ok("sender")

    def _refused(self, group: list[Spooled], reply: Reply, why: str) -> None:
        index = _batch_index(reply) if len(group) > 1 else 0
        if index is None or index >= len(group) or reply.status == 413 and len(group) > 1:
            # Cannot tell which batch is at fault (or the request was merely too large):
            # send smaller groups, down to one batch, before dropping anything.
            self._group_limit = max(1, len(group) // 2)
            return
        agent = group[index].batch.get("agent", {})
        self._warn(f"dropped batch {agent.get('boot_id')}/{agent.get('seq')}: {why}; "
                   "it can never be accepted")
        self._forget([group[index]])
        self.dropped_batches += 1

    def _clock_refused(self, group: list[Spooled], reply: Reply) -> None:
        """A timestamp ahead of the server's clock: not malformed, acceptable once the server's
        clock gets there (or this host's is fixed). The batches before the refused one go at
        once; from the refused one on they wait in the spool, in order, with backoff."""
        self._clock_cut = True
        index = _batch_index(reply) if len(group) > 1 else 0
        if index is not None and 0 < index < len(group):
            self._group_limit = index
            return
        with self._lock:
            self._spill()
        self._backoff(reply.retry_after)

    def _failed(self, group: list[Spooled], reply: Reply) -> None:
        if reply.status in BAD_TOKEN:
            problem = (f"refused the agent token ({reply.describe()}); fix the token, "
                       "batches stay spooled meanwhile")
        else:
            problem = f"{reply.describe()}; spooling and retrying"
        self._state.fail(f"server {self.client.origin}", problem)
        with self._lock:
            self._spill()
        self._backoff(reply.retry_after)

    def _backoff(self, retry_after: float | None = None) -> None:
        """Exponential backoff with full jitter: a fleet coming back does not stampede. A
        server's Retry-After (a 503, a 429) is a floor: its wait, plus a random part up to the
        larger of that wait and the backoff window, so a fleet shed at once returns spread."""
        self.spool.settle()  # the group waits with the rest: evictable again while we wait
        window = min(self._cap, self._base * 2 ** self._failures)
        self._failures = min(self._failures + 1, 32)
        if retry_after is None:
            delay = self._rand() * window
        else:
            floor = min(retry_after, RETRY_AFTER_CAP_S)
            delay = floor + self._rand() * max(floor, window)
        self._sleep(delay)

    def _forget(self, items: list[Spooled]) -> None:
        names = [item.name for item in items if item.name]
        if names:
            self.spool.remove(names)
        with self._lock:
            # By identity: a batch that was spilled to disk meanwhile is no longer here (the
            # copy on disk is then sent again, which the server answers as a duplicate).
            gone = {id(item.batch) for item in items if item.name is None}
            if gone:
                self._memq = deque(b for b in self._memq if id(b) not in gone)


def _as_rows_json(raw: bytes) -> bytes:
    """A v2 request body (one batch or ``batches``) as v1, for a server that predates v2."""
    body = json.loads(raw)
    if "batches" in body:
        return encode({"protocol": PROTOCOL_VERSION,
                       "batches": [from_columns(b) for b in body["batches"]]})
    return encode(from_columns(body))


def _http_date(value: str | None) -> float | None:
    """An HTTP date (the Date header) as unix seconds; None if absent or unreadable."""
    if not value:
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, said without a zone
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _retry_after(value: str | None, server_time: float | None, now: float) -> float | None:
    """Retry-After as seconds to wait: delay-seconds, or an HTTP date read against the server's
    own Date when it sent one (this host's clock may be off), else against ours."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    when = _http_date(value)
    if when is None:
        return None
    return max(0.0, when - (server_time if server_time is not None else now))


def _batch_index(reply: Reply) -> int | None:
    match = _BATCH_INDEX.match(str(reply.body.get("field") or ""))
    return int(match[1]) if match else None


def asked_hold(body: dict) -> float:
    """A reply's ``hold_s``: seconds the server asks the agent to hold its samples before
    sending them as one batch. A server that does not say (older than the field), or says
    something that is not a finite number of seconds, gets each sample at once."""
    hold = body.get("hold_s")
    if isinstance(hold, bool) or not isinstance(hold, int | float) or not 0 <= hold < math.inf:
        return 0.0
    return float(hold)
