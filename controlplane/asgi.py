"""ASGI entry point: ingest outside Django's request cycle, pages and API through Django,
WebSockets through Channels.

``/api/v1/ingest`` is the hot path (1,000+ agent batches/s): the full Django request cycle
under ASGI measured 1-1.6 ms of CPU per request, a bare ASGI callable under 0.1 ms
(docs/architecture.md), so the ingest app is routed ahead of Django here and shares only the
settings. This is also where the layers are wired together: the ingest app (telemetry) feeds
the live publisher (realtime) through its writer's after-commit hook.
"""

from __future__ import annotations

import os
import warnings

# WhiteNoise serves static files with a synchronous file iterator; under ASGI Django warns once
# per process that it reads it in a thread. The files are small and cached by browsers.
warnings.filterwarnings("ignore", message="StreamingHttpResponse must consume synchronous",
                        category=Warning, module="django.core.handlers.asgi")

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_app = get_asgi_application()

from agents.protocol import INGEST_PATH  # noqa: E402 - the path agents post to
from controlplane.realtime.publisher import Publisher  # noqa: E402
from controlplane.realtime.routing import websocket_app  # noqa: E402
from controlplane.telemetry.ingest.app import IngestApp  # noqa: E402


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


def ingest_app() -> IngestApp:
    """The ingest app with live push: the realtime publisher is fed what each flush committed
    (the writer's after-commit hook) and builds events for the groups browsers watch; the
    agents of the hosts it watches are asked for each sample at once."""
    ingest = IngestApp()
    publisher = Publisher(ingest.layouts.ids)
    ingest.listen(publisher)
    ingest.watch_with(publisher)
    return ingest


application = Router(ingest=ingest_app(), django=django_app, websocket=websocket_app)
