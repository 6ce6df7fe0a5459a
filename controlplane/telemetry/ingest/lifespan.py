"""The top-level ASGI router: lifespan, ingest, Django, WebSockets."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)
INGEST_PATH = "/api/v1/ingest"


class Router:
    """Routes ``/api/v1/ingest`` to the bare ingest app and the rest to Django / Channels.

    It also answers the ASGI lifespan protocol so the ingest writer starts with the server
    and, on shutdown, flushes what is pending before the process exits.
    """

    def __init__(self, ingest, django, websocket) -> None:
        self.ingest, self.django, self.websocket = ingest, django, websocket

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind == "http":
            path = scope["path"].rstrip("/")
            app = self.ingest if path == INGEST_PATH else self.django
            await app(scope, receive, send)
        elif kind == "websocket":
            await self.websocket(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.ingest.startup()
                except Exception as exc:  # noqa: BLE001 - reported to the server, which exits
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.ingest.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return
