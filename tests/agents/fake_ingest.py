"""A small real HTTP ingest server on 127.0.0.1 that records requests and plays scripted replies."""

from __future__ import annotations

import gzip
import json
import socket
import threading
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

    @property
    def batches(self) -> list[dict[str, Any]]:
        return self.body.get("batches", [self.body])

    @property
    def seqs(self) -> list[int]:
        return [b["agent"]["seq"] for b in self.batches]


class FakeIngest:
    """Replies with ``script`` in order ((status, body) pairs), then 200 for ever."""

    def __init__(self, port: int = 0) -> None:
        self.requests: list[Recorded] = []
        self.script: list[tuple[int, dict[str, Any]]] = []
        # The Pitwall-Protocols reply header; None: none sent, as a v1-only server does.
        self.protocols: str | None = None
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

    def _reply(self) -> tuple[int, dict[str, Any]]:
        if self.script:
            return self.script.pop(0)
        return 200, {"accepted": 1, "duplicates": 0, "config_version": 7, "ignored": []}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        ingest = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real server would

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                with ingest.received:
                    ingest.requests.append(Recorded(self.path, dict(self.headers),
                                                    json.loads(raw), self.client_address[1]))
                    status, body = ingest._reply()
                    ingest.received.notify_all()
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if ingest.protocols is not None:
                    self.send_header(PROTOCOLS_HEADER, ingest.protocols)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def free_port() -> int:
    """A port nothing listens on (yet): the server is "down"."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
