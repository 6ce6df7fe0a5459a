"""Two stand-in workers on loopback, for starting a power_of_two router with no replica yet.

vllm-router 0.1.17 refuses to start with ``--policy power_of_two`` and fewer than two worker
URLs ("Power-of-two policy requires at least 2 workers"), though it routes with one or none
once running; and it will not start before every host named in ``--worker-urls`` answers
/health with 200 (within ``--worker-startup-timeout-secs``, else it exits). A new service's
router has no replica in rotation yet, so the agent starts it with these two, which answer
/health, and removes them the moment the router is up. A request that reaches one meanwhile
gets 503, as it would from a router with no worker, and the router tries another.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_REFUSAL = json.dumps({"error": {"message": "no replica of this service is in the router yet",
                                 "type": "ServiceUnavailableError", "code": 503}}).encode()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/health":
            self._answer(200, b"")
        else:
            self._answer(503, _REFUSAL)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self._answer(503, _REFUSAL)

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's
        pass  # the router polls /health: nothing worth a line


class Placeholders:
    """Started on first use, stopped by ``close()``; its URLs stay the same in between."""

    def __init__(self) -> None:
        self._servers: list[ThreadingHTTPServer] = []
        self._lock = threading.Lock()

    def urls(self) -> tuple[str, str]:
        with self._lock:
            if not self._servers:
                self._servers = [self._serve() for _ in range(2)]
            first, second = (f"http://127.0.0.1:{s.server_address[1]}" for s in self._servers)
            return first, second

    def close(self) -> None:
        with self._lock:
            for server in self._servers:
                server.shutdown()
                server.server_close()
            self._servers = []

    @staticmethod
    def _serve() -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="router-placeholder",
                         daemon=True).start()
        return server
