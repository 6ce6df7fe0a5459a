"""The agent's control channel: its desired config from, and its deployments' state to, the
control plane (``GET /api/v1/agent/config``, ``POST /api/v1/agent/status``; docs/deployments.md).

Separate from ingest's connection on purpose: a config fetch must not wait behind a spool
replay, and a slow control endpoint must not stall telemetry.
"""

from __future__ import annotations

import http.client
import json
from typing import Any

from agents import __version__
from agents.transport import connect, server_url

CONFIG_PATH = "/api/v1/agent/config"
STATUS_PATH = "/api/v1/agent/status"


class ControlError(Exception):
    """No usable answer: unreachable, refused, or not the JSON the protocol promises."""


class ControlClient:
    def __init__(self, server: str, token: str, timeout: float = 10.0) -> None:
        url = server_url(server)
        self._url, self._timeout = url, timeout
        self._base = url.path.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json",
                         "User-Agent": f"pitwall-agent/{__version__}"}

    def config(self) -> dict[str, Any]:
        """{"version": n, "deployments": [...], "routers": [...]} for this agent's host."""
        body = self._call("GET", CONFIG_PATH, None)
        if not isinstance(body.get("version"), int) or not isinstance(
                body.get("deployments"), list):
            raise ControlError("the config reply lacks version or deployments")
        return body

    def report(self, statuses: list[dict[str, Any]],
               routers: list[dict[str, Any]] | None = None) -> int:
        """Send the supervisor's status, and the routers' with --router (None: the key is
        left out); returns how many deployments the server stored."""
        payload: dict[str, Any] = {"deployments": statuses}
        if routers is not None:
            payload["routers"] = routers
        return int(self._call("POST", STATUS_PATH, payload).get("stored", 0))

    def _call(self, method: str, path: str, payload: Any) -> dict[str, Any]:
        body = None if payload is None else json.dumps(payload).encode()
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn = connect(self._url, self._timeout)  # one request per connection: rare calls
        try:
            conn.request(method, self._base + path, body=body, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ControlError(f"{method} {path}: unreachable ({exc})") from None
        finally:
            conn.close()
        return _answer(method, path, response.status, raw)


def _answer(method: str, path: str, status: int, raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = {}
    if status != 200:
        detail = body.get("detail") if isinstance(body, dict) else None
        raise ControlError(f"{method} {path}: answered {status}: {detail or body or ''}")
    if not isinstance(body, dict):
        raise ControlError(f"{method} {path}: the reply is not a JSON object")
    return body
