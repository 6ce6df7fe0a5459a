"""Calling the ingest ASGI app over its real interface, from a synchronous test."""

from __future__ import annotations

import asyncio
import threading

import orjson


class AsgiClient:
    """Calls an ASGI app over its real interface, on an event loop of its own (a thread).

    The loop outlives single requests, as a server's does, so the ingest writer's task and
    its database connection persist between calls like they do under uvicorn.
    """

    def __init__(self, app) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def post(self, body=None, token: str | None = None, raw: bytes | None = None,
             headers: dict | None = None, path: str = "/api/v1/ingest") -> tuple[int, dict]:
        return self.run(self.apost(body, token, raw, headers, path))

    async def apost(self, body=None, token=None, raw=None, headers=None,
                    path="/api/v1/ingest") -> tuple[int, dict]:
        payload = raw if raw is not None else orjson.dumps(body)
        hdrs = {"content-type": "application/json", **(headers or {})}
        if token:
            hdrs["authorization"] = f"Bearer {token}"
        scope = {"type": "http", "method": "POST", "path": path,
                 "headers": [(k.encode(), v.encode()) for k, v in hdrs.items()]}
        messages = [{"type": "http.request", "body": payload, "more_body": False}]
        sent: list[dict] = []

        async def receive():
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        await self.app(scope, receive, send)
        status = sent[0]["status"]
        return status, orjson.loads(sent[1]["body"])

    def close(self) -> None:
        shutdown = getattr(self.app, "shutdown", None)
        if shutdown:
            self.run(shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
