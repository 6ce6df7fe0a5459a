"""The default readiness probe: vLLM's GET /health on loopback."""

from __future__ import annotations

import http.client
import urllib.request

# No proxy: a host's http_proxy must never see (or break) a probe of its own loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_health(port: int, timeout_s: float = 2.0) -> bool:
    """True when http://127.0.0.1:PORT/health answers 200 within the timeout."""
    try:
        with _OPENER.open(f"http://127.0.0.1:{port}/health", timeout=timeout_s) as reply:
            return reply.status == 200
    except (OSError, ValueError, http.client.HTTPException):
        return False  # refused, reset, timed out, garbled, or an error status (HTTPError)
