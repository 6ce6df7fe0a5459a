"""``/ws/live/``: a signed-in browser subscribes to live groups and receives their events.

Protocol in docs/live.md. Events arrive already serialised (channel_layer.py) and are
forwarded as they are. A socket whose session ended or whose user was deactivated is closed
with 4401, one whose user lost fleet.view_host (their role removed) with 4403: checked at every
ping and subscribe, and before forwarding an event when the last check is older than
``PITWALL_LIVE_RECHECK_S`` (20), so that a client that stops pinging is still re-checked.

Redis (the channel layer) down: every socket's own receive on the layer fails at once, and
the socket is closed with 1013 (try again later) so that the page shows "reconnecting…" and
comes back by itself; a socket opened during the outage is closed the same way (docs/live.md,
Failure behaviour).
"""

from __future__ import annotations

import contextlib
import time
from importlib import import_module

import orjson
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import SESSION_KEY, get_user_model

from controlplane.realtime import groups, interest
from controlplane.realtime.channel_layer import LAYER_ERRORS
from controlplane.realtime.events import Reply, encode
from controlplane.realtime.metrics import LIVE_CLIENTS

CLOSE_SIGNED_OUT = 4401  # the page sends the browser to the login form, no reconnect
CLOSE_FORBIDDEN = 4403  # signed in, but no role that reads the fleet
CLOSE_TRY_AGAIN = 1013  # the channel layer is unreachable: reconnect with back-off
USAGE = 'send {"type": "subscribe", "groups": [...]} or {"type": "ping"}'
# What the server raises on a send to a socket that is already closed or gone.
SEND_AFTER_CLOSE = (RuntimeError, OSError)


class LiveConsumer(AsyncWebsocketConsumer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.watching: dict[str, str] = {}  # client group name -> channel-layer group
        self.allowed = False
        self.checked_at = 0.0  # time.monotonic() of the last check of the user's rights

    async def __call__(self, scope, receive, send) -> None:
        """Channels' loop, which ends with the channel layer's error when Redis goes away
        (its receive on the layer fails): close with 1013 instead, and clean up as a
        disconnect would (the server would otherwise log an ASGI error per socket, and the
        client count would keep the socket)."""
        try:
            await super().__call__(scope, receive, send)
        except LAYER_ERRORS:
            with contextlib.suppress(*SEND_AFTER_CLOSE):  # the client may be gone already
                await self.close(code=CLOSE_TRY_AGAIN)
            await self.disconnect(CLOSE_TRY_AGAIN)

    async def connect(self) -> None:
        await self.accept()  # then close: a close code reaches the page only after accept
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_SIGNED_OUT)
        elif not await _may_read_fleet(user):
            await self.close(code=CLOSE_FORBIDDEN)
        else:
            self.allowed = True
            self.checked_at = time.monotonic()
            LIVE_CLIENTS.inc()

    async def disconnect(self, code: int) -> None:
        if self.allowed:
            self.allowed = False
            LIVE_CLIENTS.dec()
        with contextlib.suppress(*LAYER_ERRORS):  # Redis gone: its groups expire by themselves
            for group in set(self.watching.values()):
                await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None):
        if not self.allowed:  # a frame that raced the 4401 or 4403 close
            return
        try:
            message = orjson.loads(text_data or bytes_data or b"")
        except orjson.JSONDecodeError:
            message = None
        kind = message.get("type") if isinstance(message, dict) else None
        try:
            if kind == "subscribe":
                await self._subscribe(message.get("groups"))  # type: ignore[union-attr]
            elif kind == "ping":
                await self._ping()
            else:
                await self._reply({"type": "error", "error": USAGE})
        except LAYER_ERRORS:
            await self.close(code=CLOSE_TRY_AGAIN)

    async def _subscribe(self, names: object) -> None:
        if not await self._still_allowed():
            return
        if not isinstance(names, list):
            await self._reply({"type": "error", "error": "groups must be a list"})
            return
        accepted, denied = await groups.resolve(names)
        wanted, current = set(accepted.values()), set(self.watching.values())
        for group in current - wanted:
            await self.channel_layer.group_discard(group, self.channel_name)
        for group in wanted - current:
            await self.channel_layer.group_add(group, self.channel_name)
        self.watching = accepted
        await interest.touch(wanted, subscribed=True)
        await self._reply({"type": "subscribed", "groups": list(accepted), "denied": denied})

    async def _ping(self) -> None:
        if not await self._still_allowed():
            return
        await interest.touch(set(self.watching.values()))
        await self._reply({"type": "pong", "server_time": time.time()})

    async def live_event(self, message: dict) -> None:
        """An event from publish(), for a group this socket joined."""
        due = time.monotonic() - self.checked_at >= settings.PITWALL["LIVE_RECHECK_S"]
        if not self.allowed or (due and not await self._still_allowed()):
            return
        await self.send(text_data=message["text"])

    async def _still_allowed(self) -> bool:
        """Re-read the session and the user's rights; close the socket when they are gone."""
        refusal = await _refusal(self.scope)
        self.checked_at = time.monotonic()
        if refusal is None:
            return True
        self.allowed = False  # no event slips out between this close and the disconnect
        LIVE_CLIENTS.dec()
        await self.close(code=refusal)
        return False

    async def _reply(self, message: Reply) -> None:
        await self.send(text_data=encode(message))


@database_sync_to_async
def _may_read_fleet(user) -> bool:
    return user.has_perm("fleet.view_host")


@database_sync_to_async
def _refusal(scope: dict) -> int | None:
    """None while the session still exists and names this user, the user is active and still
    reads the fleet; else the close code that says which is gone."""
    user, key = scope["user"], scope["session"].session_key
    store = import_module(settings.SESSION_ENGINE).SessionStore(key)
    if str(store.load().get(SESSION_KEY)) != str(user.pk):
        return CLOSE_SIGNED_OUT
    # A fresh row: the scope's user caches the permissions it had at the handshake.
    current = get_user_model()._default_manager.filter(pk=user.pk, is_active=True).first()
    if current is None:
        return CLOSE_SIGNED_OUT
    return None if current.has_perm("fleet.view_host") else CLOSE_FORBIDDEN
