"""Which live groups some browser watches, kept in Redis beside the channel layer.

One sorted set: member = channel-layer group name, score = unix time its interest lapses.
Consumers renew their groups on subscribe and on every ping (every 20 s), so a group lapses
about ``TTL_S`` after its last socket left. The ingest publisher reads the set about once a
second and builds events only for those groups: its cost follows the viewers, not the fleet.
A subscribe also bumps a version number, which the publisher polls (one GET) far more often,
so a page that just subscribed gets its first events without waiting for the next read.

The Redis is the channel layer's (its first host), under the layer's prefix, so pointing the
layer elsewhere moves both, and parallel test runs with their own prefix do not meet.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Iterable

from django.conf import settings
from redis.asyncio import Redis

TTL_S = 60  # three missed pings
TIMEOUT_S = 2.0  # connect / read: a Redis that does not answer is treated as down

_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> {url: Redis}


def _target() -> tuple[str, str]:
    """(Redis URL, sorted-set key) from the default channel layer's settings."""
    config = settings.CHANNEL_LAYERS.get("default", {}).get("CONFIG", {})
    hosts = config.get("hosts") or [settings.REDIS_URL]
    first = hosts[0]
    if isinstance(first, dict):
        url = first.get("address", settings.REDIS_URL)
    elif isinstance(first, (list, tuple)):
        url = f"redis://{first[0]}:{first[1]}"
    else:
        url = first
    return url, f"{config.get('prefix', 'asgi')}:live:interest"


def _version_key(key: str) -> str:
    return f"{key}:version"


def _client(url: str) -> Redis:
    """One client per event loop (redis-py connections belong to the loop that opened them)."""
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    client = per_loop.get(url)
    if client is None:
        client = per_loop[url] = Redis.from_url(
            url, socket_connect_timeout=TIMEOUT_S, socket_timeout=TIMEOUT_S)
    return client


async def touch(groups: Iterable[str], subscribed: bool = False) -> None:
    """Mark ``groups`` watched for the next ``TTL_S`` seconds; ``subscribed``: tell the
    publishers at once (a ping only renews)."""
    expires = time.time() + TTL_S
    mapping = {group: expires for group in groups}
    if not mapping:
        return
    url, key = _target()
    async with _client(url).pipeline(transaction=False) as pipe:
        pipe.zadd(key, mapping)
        if subscribed:
            pipe.incr(_version_key(key))
        await pipe.execute()


async def version() -> int:
    """A number that changes whenever a socket subscribes."""
    url, key = _target()
    return int(await _client(url).get(_version_key(key)) or 0)


async def watched() -> tuple[int, frozenset[str]]:
    """(version, the groups some socket renewed within ``TTL_S``); lapsed ones are removed."""
    url, key = _target()
    async with _client(url).pipeline(transaction=False) as pipe:
        pipe.get(_version_key(key))
        pipe.zremrangebyscore(key, "-inf", time.time())
        pipe.zrange(key, 0, -1)
        number, _, members = await pipe.execute()
    return int(number or 0), frozenset(m.decode() for m in members)
