"""Reading an ingest request's body: its headers, a deadline, the size limits, gzip, and a bound
on how much JSON structure it may hold before anything decodes it.

Why a deadline: a client that declares a large body and sends it a byte at a time would hold
its request (and its connection) for as long as it likes. Why the structure bound: JSON
decoders build one Python object per array or object, and millions of tiny ones (an 8 KB gzip
body inflating to 8 MiB of ``[],[],...``) cost about 100 ms per MiB and hundreds of MB, on the
event loop, where real agent bodies cost 12-17 ms per MiB (docs/security.md). orjson and
msgspec hold the GIL while they decode, so a thread would not keep the loop free: the bound is
what does.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass

from controlplane.telemetry.ingest.errors import BadRequest

# Arrays and objects any body may hold whatever its size: a small request is cheap anyway.
STRUCTURE_ALLOWANCE = 1024


@dataclass(frozen=True)
class BodyLimits:
    max_bytes: int  # INGEST_MAX_BODY_BYTES, before and after gzip
    timeout_s: float  # INGEST_BODY_TIMEOUT_S: the whole body must arrive within it
    bytes_per_container: int  # INGEST_JSON_BYTES_PER_CONTAINER


async def read_body(headers: dict, receive, limits: BodyLimits) -> bytes:
    """The request's JSON, inflated and bounded; a BadRequest (4xx) names what is wrong."""
    ctype = headers.get(b"content-type", b"application/json").split(b";")[0].strip()
    if ctype != b"application/json":
        raise BadRequest("Content-Type must be application/json", status=415)
    encoding = headers.get(b"content-encoding", b"identity").strip().lower()
    if encoding not in (b"identity", b"gzip"):
        raise BadRequest("Content-Encoding must be gzip or absent", status=415)
    declared = headers.get(b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_bytes:
        raise BadRequest(f"the body is over the {limits.max_bytes}-byte limit", status=413)
    try:
        async with asyncio.timeout(limits.timeout_s):
            raw = await _receive_all(receive, limits.max_bytes)
    except TimeoutError:
        raise BadRequest(f"the body did not arrive within {limits.timeout_s:g} s "
                         "(INGEST_BODY_TIMEOUT_S)", status=408) from None
    if encoding == b"gzip":
        raw = gunzip(raw, limits.max_bytes)
    check_structure(raw, limits.bytes_per_container)
    return raw


async def _receive_all(receive, limit: int) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BadRequest("the client went away", status=400)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BadRequest(f"the body is over the {limit}-byte limit", status=413)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def gunzip(raw: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise BadRequest(f"the gzip body is corrupt: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise BadRequest(f"the decompressed body is over the {limit}-byte limit", status=413)
    return out


def check_structure(raw: bytes, bytes_per_container: int) -> None:
    """Refuses a body denser in arrays and objects than any agent writes, before decoding it.

    Counting brackets is a C scan (about 1 ms per 8 MiB); brackets inside strings count too,
    which only overstates. Real bodies hold one container per 74 bytes (protocol 2) to 230
    (an inventory) (measured on the agent's and the load generator's batches).
    """
    containers = raw.count(b"[") + raw.count(b"{")
    allowed = STRUCTURE_ALLOWANCE + len(raw) // bytes_per_container
    if containers > allowed:
        raise BadRequest(
            f"the body holds {containers} JSON arrays and objects in {len(raw)} bytes, more "
            f"than one per {bytes_per_container} bytes (INGEST_JSON_BYTES_PER_CONTAINER): no "
            f"agent batch is that dense")
