"""``publish()``: the one place that sends live events to the channel layer.

An event travels as one pre-serialised JSON text; consumers forward it to their sockets as it
is (``LiveConsumer.live_event``), so a group of many sockets costs one encoding.
"""

from __future__ import annotations

from channels.layers import get_channel_layer
from redis.exceptions import RedisError

LIVE_EVENT = "live.event"  # the consumer method that handles it: live_event
# What a channel layer on Redis raises when Redis is gone or slow.
LAYER_ERRORS = (RedisError, OSError, TimeoutError)


async def publish(group: str, text: str) -> None:
    """Send one event text to every socket in ``group`` (a channel-layer group name)."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(group, {"type": LIVE_EVENT, "text": text})
