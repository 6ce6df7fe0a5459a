"""On-disk spool: batches the server could not take yet, kept across restarts, replayed in order.

One gzip file per batch, named ``<16-digit counter>-<samples>.json.gz`` so that a plain sort is
the send order; the counter continues from the highest name on disk, so order holds across
restarts. Files are written atomically (tmp + fsync + rename), so a crash (SIGKILL, power loss)
leaves either a whole batch or nothing: a temporary file found at start is deleted, a file that
cannot be read back is set aside as ``.corrupt``. The spool is bounded by the bytes of its files
and by the disk: past the bound, or when a write finds the disk full, the oldest batches are
evicted (the newest ones are kept) and counted in ``evictions.json``, and those counts travel to
the server in ``agent.spool`` until it acknowledges them.

Batches are spooled in protocol v2 (columns, docs/protocol.md), the form the sender sends, so a
replay sends the files' bytes as they are. Files an older agent wrote in v1 are converted to v2
as they are read back: an upgraded agent replays them with the rest.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import threading
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.collectors.base import Warn, WarnOnce, stderr_warn
from agents.protocol import COLUMNS_VERSION, as_columns, is_columns, sample_count, to_columns

Batch = dict[str, Any]

_NAME = re.compile(r"^(\d{16})-(\d+)\.json\.gz(\.corrupt)?$")
_TMP_PREFIX = ".tmp-"
_EVICTIONS = "evictions.json"
# The counts file always has this size, so that a full disk can still update it in place.
_EVICTIONS_WIDTH = 64
# A write that fails with these is retried after evicting the oldest batch: the disk is full.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# Writes in a row that needed no eviction before a full disk is said to have room again (one
# freed file can hold several small batches: "recovered" must not flap at every eviction).
_ROOM_AGAIN_WRITES = 10
# Replay groups: what one multi-batch request carries at most (uncompressed JSON bytes).
REPLAY_MAX_BATCHES = 200
REPLAY_MAX_BYTES = 4 * 1024 * 1024
# How every v2 batch this agent spools begins (``to_columns`` writes "protocol" first).
_V2_START = b'{"protocol":%d,' % COLUMNS_VERSION


@dataclass(frozen=True)
class _Entry:
    name: str
    size: int  # bytes on disk, what the bound counts
    samples: int


@dataclass
class Spooled:
    """A batch (protocol v2) on its way to the server. Read back from the spool it has
    ``name`` (what ``Spool.remove`` takes) and ``raw``, its JSON as spooled: a replay sends
    that as it is and parses it only to change it. A batch still in memory has neither, only
    ``parsed``."""

    name: str | None
    raw: bytes | None = None  # None once changed: encoded again from ``parsed``
    parsed: Batch | None = None

    @property
    def batch(self) -> Batch:
        if self.parsed is None:
            self.parsed = json.loads(self.raw or b"{}")
        return self.parsed


def encode(batch: Batch) -> bytes:
    return json.dumps(batch, separators=(",", ":"), ensure_ascii=False).encode()


def join_batches(raws: list[bytes]) -> bytes:
    """A multi-batch v2 request body (docs/protocol.md) from each v2 batch's JSON, not
    parsed."""
    return b'{"protocol":%d,"batches":[' % COLUMNS_VERSION + b",".join(raws) + b"]}"


def spooled_as_columns(raw: bytes) -> bytes:
    """A spooled batch's JSON in protocol v2: as it is, or converted from the v1 an agent
    before this one spooled (a ValueError if it is no batch of either protocol)."""
    if raw.startswith(_V2_START):
        return raw
    batch = json.loads(raw)
    if not isinstance(batch, dict):
        raise ValueError("not a JSON object")
    if is_columns(batch):
        return raw
    try:
        return encode(to_columns(batch))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a v1 batch: {exc!r}") from None


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either the old content or all of the new one."""
    tmp = path.with_name(_TMP_PREFIX + path.name)
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    # The rename itself is only durable once the directory entry is on disk. The file is in
    # place already, so a failure here must not be taken for a write that did not happen.
    try:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def overwrite_in_place(path: Path, data: bytes) -> None:
    """Write ``data`` over an existing file of at least its size: needs no new disk block (a
    full disk) and, as one small write at offset 0, is never torn by a killed process."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """A bounded FIFO of batches on disk; safe to use from the collector and sender threads."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int,
                 warn: Warn = stderr_warn) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._warn = warn
        self._lock = threading.Lock()
        self._entries: deque[_Entry] = deque()
        self._bytes = 0
        self._next = 0
        self._evicted = [0, 0]  # batches, samples
        # The group the sender peeked and has not settled: never evicted. The server may be
        # storing it, and a batch both stored and counted as evicted would be a loss counted
        # that is not one (seen in the fault suite: evicted 1,543, lost 1,542).
        self._sending: set[str] = set()
        self._room_writes = _ROOM_AGAIN_WRITES  # writes in a row that needed no eviction
        # Batches carry hostnames and engine configs: keep them private to the agent's user.
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(self.directory, os.W_OK | os.X_OK):  # say so at start, not mid-outage
            raise PermissionError(errno.EACCES, "not writable", str(self.directory))
        self._state = WarnOnce(warn)
        self._load()

    def _load(self) -> None:
        for name in sorted(os.listdir(self.directory)):
            path = self.directory / name
            if name.startswith(_TMP_PREFIX):
                path.unlink(missing_ok=True)  # a write a crash interrupted: never spooled
                continue
            match = _NAME.match(name)
            if not match:
                continue
            self._next = max(self._next, int(match[1]) + 1)
            if not match[3]:
                entry = _Entry(name, path.stat().st_size, int(match[2]))
                self._entries.append(entry)
                self._bytes += entry.size
        self._evicted = self._read_evictions()
        if not (self.directory / _EVICTIONS).exists():
            # Made now, while there is room, so that a full disk can update it in place.
            self._persist_evictions()

    def _read_evictions(self) -> list[int]:
        path = self.directory / _EVICTIONS
        try:
            data = json.loads(path.read_text())
            return [int(data["batches"]), int(data["samples"])]
        except FileNotFoundError:
            return [0, 0]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._warn(f"spool: unreadable {path} ({exc}); eviction counts restart at 0")
            return [0, 0]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes

    def append(self, batch: Batch) -> None:
        """Add a batch (either protocol; it is written as v2) behind the others, evicting the
        oldest ones past the bound."""
        samples = sample_count(batch)
        try:
            data = gzip.compress(encode(as_columns(batch)), compresslevel=6, mtime=0)
        except (TypeError, ValueError) as exc:  # a collector put something JSON cannot hold
            self._warn(f"spool: a batch cannot be encoded as JSON ({exc}); counted as evicted")
            with self._lock:
                self._count_evicted(1, samples)
            return
        with self._lock:
            if len(data) > self.max_bytes:
                self._warn(f"spool: a batch of {len(data)} bytes exceeds the whole spool "
                           f"bound ({self.max_bytes}); counted as evicted")
                self._count_evicted(1, samples)
                return
            evicted = [0, 0]
            if not (self._make_room(len(data), evicted) and self._write(data, samples, evicted)):
                evicted[0] += 1
                evicted[1] += samples
            if evicted[0]:
                self._count_evicted(*evicted)

    def _make_room(self, size: int, evicted: list[int]) -> bool:
        """Evict past the bound (caller holds the lock); False when only batches being sent
        are left and the new one still does not fit: it is the one counted as evicted."""
        while self._bytes + size > self.max_bytes:
            if not self._evict_oldest(evicted):
                return False
        return True

    def _write(self, data: bytes, samples: int, evicted: list[int]) -> bool:
        """Write a new batch file (caller holds the lock). On a full disk the oldest batches
        make room, as past the bound; False when the batch could not be written at all."""
        made_room = False
        while True:
            name = f"{self._next:016d}-{samples}.json.gz"
            try:
                write_atomic(self.directory / name, data)
                break
            except OSError as exc:
                if exc.errno in _DISK_FULL and self._evict_oldest(evicted):
                    self._state.fail("spool", f"{self.directory} is full ({exc.strerror}); "
                                              "the oldest batches are evicted to make room")
                    made_room = True
                    continue
                # Disk full with nothing left to evict, or another error: said once.
                self._state.fail("spool", f"cannot write to {self.directory} "
                                          f"({exc.strerror or exc}); batches counted as evicted")
                self._room_writes = 0
                return False
        self._room_writes = 0 if made_room else self._room_writes + 1
        if self._room_writes >= _ROOM_AGAIN_WRITES:
            self._state.ok("spool")
        self._next += 1
        self._entries.append(_Entry(name, len(data), samples))
        self._bytes += len(data)
        return True

    def _evict_oldest(self, evicted: list[int]) -> bool:
        """Evict the oldest batch that is not being sent; False when there is none."""
        index = next((i for i, entry in enumerate(self._entries)
                      if entry.name not in self._sending), None)
        if index is None:
            return False
        old = self._entries[index]
        del self._entries[index]
        self._bytes -= old.size
        (self.directory / old.name).unlink(missing_ok=True)
        evicted[0] += 1
        evicted[1] += old.samples
        return True

    def peek(self, max_batches: int = REPLAY_MAX_BATCHES,
             max_bytes: int = REPLAY_MAX_BYTES) -> list[Spooled]:
        """The oldest batches, in order, up to the limits (always at least one if any)."""
        with self._lock:
            head = [self._entries[i] for i in range(min(max_batches, len(self._entries)))]
            self._sending = {entry.name for entry in head}  # from now: read, then sent
        group: list[Spooled] = []
        total = 0
        for entry in head:
            raw = self._read(entry)
            if raw is None:
                continue
            if group and total + len(raw) > max_bytes:
                break
            group.append(Spooled(entry.name, raw))
            total += len(raw)
        with self._lock:
            self._sending = {item.name for item in group}  # what did not fit is not sent
        return group

    def settle(self) -> None:
        """The sender is done with the group it peeked (it failed and waits): its batches may
        be evicted again, the oldest first."""
        with self._lock:
            self._sending.clear()

    def _read(self, entry: _Entry) -> bytes | None:
        path = self.directory / entry.name
        try:
            raw = gzip.decompress(path.read_bytes())
            # Not parsed: gzip's CRC proves these are the bytes append() wrote, the JSON of
            # a dict. The braces are checked so a file put here by other means is refused.
            if raw[:1] != b"{" or raw.rstrip()[-1:] != b"}":
                raise ValueError("not a JSON object")
            return spooled_as_columns(raw)
        except FileNotFoundError:  # evicted meanwhile, or deleted by hand: forget it
            with self._lock:
                self._forget({entry.name})
            return None
        except (OSError, EOFError, zlib.error, ValueError) as exc:
            self._set_aside(entry, exc)
            return None

    def _set_aside(self, entry: _Entry, exc: Exception) -> None:
        path = self.directory / entry.name
        aside = path.with_name(entry.name + ".corrupt")
        self._warn(f"spool: corrupt file {path} ({type(exc).__name__}: {exc}); moved to {aside}")
        with self._lock:
            self._forget({entry.name})
            try:
                os.replace(path, aside)
            except OSError:
                path.unlink(missing_ok=True)

    def remove(self, names: list[str]) -> None:
        """Delete batches the server acknowledged."""
        with self._lock:
            self._forget(set(names))
            self._sending.difference_update(names)
        for name in names:
            (self.directory / name).unlink(missing_ok=True)

    def _forget(self, names: set[str]) -> None:
        # Acknowledged batches are nearly always at the head: pop them first, cheaply.
        while self._entries and self._entries[0].name in names:
            names.discard(self._entries[0].name)
            self._bytes -= self._entries.popleft().size
        if names:
            kept = deque(e for e in self._entries if e.name not in names)
            self._bytes = sum(e.size for e in kept)
            self._entries = kept

    def evictions(self) -> tuple[int, int]:
        """(batches, samples) evicted and not yet acknowledged by the server."""
        with self._lock:
            return self._evicted[0], self._evicted[1]

    def acknowledge_evictions(self, batches: int, samples: int) -> None:
        """The server stored a batch that reported these counts: stop reporting them."""
        with self._lock:
            self._count_evicted(-batches, -samples)

    def _count_evicted(self, batches: int, samples: int) -> None:
        self._evicted = [max(0, self._evicted[0] + batches), max(0, self._evicted[1] + samples)]
        self._persist_evictions()

    def _persist_evictions(self) -> None:
        """The counts, on disk for the next start. Until they are, the counts in memory still
        travel to the server; only a restart before they could be written loses them."""
        path = self.directory / _EVICTIONS
        data = json.dumps({"batches": self._evicted[0], "samples": self._evicted[1]}).encode()
        data = data.ljust(_EVICTIONS_WIDTH)  # JSON allows the trailing blanks
        try:
            write_atomic(path, data)
        except OSError as exc:
            try:  # a full disk has no block for the temporary file: reuse the file's own
                overwrite_in_place(path, data)
            except OSError:
                self._state.fail("spool counts", f"cannot persist eviction counts to {path} "
                                                 f"({exc.strerror or exc}); kept in memory")
                return
        self._state.ok("spool counts")
