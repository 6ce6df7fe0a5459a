"""Delivery to ``POST /api/v1/ingest``: a keep-alive HTTP client and a sender thread.

The collection loop hands each batch to ``Shipper.submit`` and never waits on the network. The
sender keeps recent batches in memory while the server answers; on the first failure they move,
in order, to the on-disk spool, and from then on new batches queue on disk behind them until a
replay (several batches per request) drains it. Replies follow docs/protocol.md.
"""

from __future__ import annotations

import gzip
import http.client
import json
import random
import re
import ssl
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, urlsplit

from agents import __version__
from agents.collectors.base import Warn, WarnOnce, stderr_warn
from agents.protocol import COLUMNS_VERSION, PROTOCOL_VERSION, PROTOCOLS_HEADER, to_columns
from agents.spool import REPLAY_MAX_BATCHES, Batch, Spool, Spooled, encode, join_batches

INGEST_PATH = "/api/v1/ingest"
PERMANENT = frozenset({400, 413, 415})  # the same bytes can never be accepted: drop them
BAD_TOKEN = frozenset({401, 403})  # an operator must fix the token: keep the data meanwhile
_BATCH_INDEX = re.compile(r"^batches\[(\d+)\]")
_STALE = (ConnectionResetError, BrokenPipeError)  # includes http.client.RemoteDisconnected


@dataclass(frozen=True)
class Reply:
    status: int  # 0 when no HTTP answer came back (refused, timeout, reset)
    body: dict[str, Any] = field(default_factory=dict)
    problem: str = ""  # why there was no answer

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

    Live batches go out as protocol v2 (columns, cheaper for the server to check) once the
    server's replies announce it (``Pitwall-Protocols: 1, 2``), as v1 until then and to a
    server that does not; spooled batches are replayed as they were spooled (v1).
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
        """``payload``: a batch, or a replay body already encoded as JSON. Replays are large
        and CPU-bound, so they are compressed fast; one live batch is compressed harder."""
        columns = self.protocol == COLUMNS_VERSION and not isinstance(payload, bytes)
        reply = self._post(payload, columns)
        if columns and reply.status == 400 and reply.body.get("field") == "protocol":
            # A server that no longer speaks v2 (rolled back): v1 from now on, this batch too.
            self.protocol = PROTOCOL_VERSION
            reply = self._post(payload, False)
        return reply

    def _post(self, payload: Batch | bytes, columns: bool) -> Reply:
        if isinstance(payload, bytes):
            body = gzip.compress(payload, compresslevel=1, mtime=0)
        else:
            body = gzip.compress(encode(to_columns(payload) if columns else payload),
                                 compresslevel=5, mtime=0)
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
        return Reply(response.status, body if isinstance(body, dict) else {})

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


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
        self.delivered_batches = 0
        self.dropped_batches = 0
        self.config_version: int | None = None

    def submit(self, batch: Batch) -> None:
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
        if 200 <= reply.status < 300:
            self._delivered(group, reply, evicted)
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

    def _failed(self, group: list[Spooled], reply: Reply) -> None:
        if reply.status in BAD_TOKEN:
            problem = (f"refused the agent token ({reply.describe()}); fix the token, "
                       "batches stay spooled meanwhile")
        else:
            problem = f"{reply.describe()}; spooling and retrying"
        self._state.fail(f"server {self.client.origin}", problem)
        with self._lock:
            self._spill()
        self._backoff()

    def _backoff(self) -> None:
        """Exponential backoff with full jitter: a fleet coming back does not stampede."""
        delay = self._rand() * min(self._cap, self._base * 2 ** self._failures)
        self._failures = min(self._failures + 1, 32)
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


def _batch_index(reply: Reply) -> int | None:
    match = _BATCH_INDEX.match(str(reply.body.get("field") or ""))
    return int(match[1]) if match else None
