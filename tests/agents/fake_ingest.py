"""A small real HTTP ingest server on 127.0.0.1 that records requests and plays scripted replies."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agents.protocol import PROTOCOLS_HEADER


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    client_port: int
    status: int = 0  # what the server answered

    @property
    def batches(self) -> list[dict[str, Any]]:
        return self.body.get("batches", [self.body])

    @property
    def seqs(self) -> list[int]:
        return [b["agent"]["seq"] for b in self.batches]


class FakeIngest:
    """Replies with ``script`` in order ((status, body) or (status, body, headers)), then 200
    for ever. ``clock_offset`` sets the server's clock (its Date header) against this host's;
    with ``max_skew`` set, a batch with a ts further ahead of that clock is refused as the real
    server does (400, reason "clock") before the script is consulted."""

    def __init__(self, port: int = 0) -> None:
        self.requests: list[Recorded] = []
        self.script: list[tuple[int, dict[str, Any]]] = []
        # The Pitwall-Protocols reply header; None: none sent, as a v1-only server does.
        self.protocols: str | None = None
        self.clock_offset = 0.0
        self.max_skew: float | None = None
        self.hold_s: float | None = None  # the replies' hold_s; None: not said, as before it
        self.received = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)

    def __enter__(self) -> FakeIngest:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wait_for(self, batches: int, timeout: float = 30.0) -> bool:
        """Wait until this many batches arrived; the timeout is a safety net against a hang."""
        with self.received:
            return self.received.wait_for(
                lambda: sum(len(r.batches) for r in self.requests) >= batches, timeout)

    def now(self) -> float:
        return time.time() + self.clock_offset

    def _reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        ahead = self._first_ahead(body)
        if ahead is not None:
            return 400, {"error": "ts is in the future", "field": ahead, "reason": "clock"}, {}
        if self.script:
            status, reply, *headers = self.script.pop(0)
            return status, reply, headers[0] if headers else {}
        reply = {"accepted": 1, "duplicates": 0, "config_version": 7, "ignored": []}
        if self.hold_s is not None:
            reply["hold_s"] = self.hold_s
        return 200, reply, {}

    def _first_ahead(self, body: dict[str, Any]) -> str | None:
        if self.max_skew is None:
            return None
        batches = body.get("batches", [body])
        for i, batch in enumerate(batches):
            prefix = f"batches[{i}]." if "batches" in body else ""
            if batch.get("protocol") == 2:  # a v2 request's batches are v2 too
                for j, ts in enumerate(batch.get("ts", ())):
                    if ts > self.now() + self.max_skew:
                        return f"{prefix}ts[{j}]"
                continue
            for j, sample in enumerate(batch.get("samples", ())):
                if sample["ts"] > self.now() + self.max_skew:
                    return f"{prefix}samples[{j}].ts"
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        ingest = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real server would

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                with ingest.received:
                    request = json.loads(raw)
                    ingest.requests.append(Recorded(self.path, dict(self.headers),
                                                    request, self.client_address[1]))
                    status, body, extra = ingest._reply(request)
                    ingest.requests[-1].status = status
                    ingest.received.notify_all()
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in extra.items():
                    self.send_header(name, value)
                if ingest.protocols is not None:
                    self.send_header(PROTOCOLS_HEADER, ingest.protocols)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

            def date_time_string(self, timestamp: float | None = None) -> str:
                # The Date header, from the server's clock (``clock_offset``).
                return super().date_time_string(ingest.now() if timestamp is None else timestamp)

        return Handler


def free_port() -> int:
    """A port nothing listens on (yet): the server is "down"."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
