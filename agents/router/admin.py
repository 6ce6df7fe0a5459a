"""Talking to one running vllm-router on loopback: its worker list and its Prometheus page.

vllm-router 0.1.17's admin routes: ``GET /workers`` (``{"workers": [{"url": ...,
"is_healthy": ...}, ...]}``), ``POST /add_worker?url=`` (200, or 400 "already exists"; it waits
for the worker's /health for up to ``--worker-startup-timeout-secs``) and ``POST
/remove_worker?url=`` (200, also for a URL it does not hold). Its metrics are on a port of
their own (``--prometheus-port``), in the Prometheus text format.

Every call has a short timeout: the agent's loop calls these between other work, and a router
that does not answer within it is reported, not waited for.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from agents.router.spec import MAX_URL_CHARS, MAX_WORKERS

# No proxy: a host's http_proxy must never see (or break) a call to its own loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
CALL_TIMEOUT_S = 5.0  # beyond the router's own wait for a worker (WORKER_STARTUP_TIMEOUT_S)
MAX_REPLY_BYTES = 1 << 20  # a worker list of 64 entries is about 16 KB
MAX_METRICS_BYTES = 4 << 20  # the router's page with 64 workers' histograms is well below

_REQUESTS = "vllm_router_requests_total"
_PROCESSED = "vllm_router_processed_requests_total"
# Counted for every request a worker served or failed, whatever the policy: the processed
# counter above is not kept by every policy (0.1.17: power_of_two and kv_aware leave it out).
_OUTCOMES = "vllm_router_cb_outcomes_total"
_RUNNING = "vllm_router_running_requests"
# Each try of a request that found no worker to send it to (0.1.17 counts it under this
# error_type; a request counts in _REQUESTS only once a worker took it). At zero replicas, the
# sign that a request waits in the router's retries.
_ERRORS = "vllm_router_request_errors_total"
_NO_WORKER = "no_available_workers"
_HEALTH = "vllm_router_worker_health"


class RouterAdminError(Exception):
    """The router did not answer, or not as its API says; the message is one line."""


@dataclass(frozen=True)
class Worker:
    url: str
    healthy: bool


@dataclass
class RouterMetrics:
    requests_total: int = 0
    per_worker: dict[str, dict[str, int]] = field(default_factory=dict)
    no_worker_tries: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"requests_total": self.requests_total,
                "per_worker": {url: dict(numbers) for url, numbers in self.per_worker.items()},
                "no_worker_tries": self.no_worker_tries}


def workers(port: int, timeout_s: float = CALL_TIMEOUT_S) -> list[Worker]:
    """The router's own list, in its order."""
    body = _call("GET", port, "/workers", timeout_s)
    try:
        entries = json.loads(body)["workers"]
        found = [Worker(str(w["url"]), w.get("is_healthy") is not False) for w in entries]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise RouterAdminError(f"GET /workers: not the worker list: {body[:200]!r}") from None
    return [w for w in found if len(w.url) <= MAX_URL_CHARS][:MAX_WORKERS]


def add_worker(port: int, url: str, timeout_s: float = CALL_TIMEOUT_S) -> None:
    try:
        _call("POST", port, "/add_worker?" + urllib.parse.urlencode({"url": url}), timeout_s)
    except _Refused as refused:
        if "already exists" not in refused.body:  # the wanted outcome, reached before
            raise RouterAdminError(str(refused)) from None


def remove_worker(port: int, url: str, timeout_s: float = CALL_TIMEOUT_S) -> None:
    _call("POST", port, "/remove_worker?" + urllib.parse.urlencode({"url": url}), timeout_s)


def metrics(prometheus_port: int, timeout_s: float = CALL_TIMEOUT_S) -> str:
    return _call("GET", prometheus_port, "/metrics", timeout_s, MAX_METRICS_BYTES)


def parse_metrics(text: str, listed: Iterable[Worker]) -> RouterMetrics:
    """The router's totals for the workers it lists now: a removed worker's counters stay on
    the page but are not its workers' any more. A worker the page does not name yet (no
    request so far) counts zero, with the health its worker list gives."""
    listed = list(listed)
    found: dict[str, dict[str, float]] = {w.url: {} for w in listed}
    requests = no_worker = 0.0
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == _REQUESTS:
                    requests += sample.value
                    continue
                if sample.name == _ERRORS and sample.labels.get("error_type") == _NO_WORKER:
                    no_worker += sample.value
                    continue
                numbers = found.get(sample.labels.get("worker", ""))
                if numbers is not None and sample.name in (_PROCESSED, _RUNNING, _HEALTH):
                    numbers[sample.name] = sample.value
                elif numbers is not None and sample.name == _OUTCOMES:
                    numbers[_OUTCOMES] = numbers.get(_OUTCOMES, 0.0) + sample.value
    except ValueError as exc:  # prometheus_client's parser says what it could not read
        raise RouterAdminError(f"metrics: not the Prometheus text format ({exc})") from None
    return RouterMetrics(_count(requests), {
        w.url: {"processed": _count(found[w.url].get(_PROCESSED,
                                                     found[w.url].get(_OUTCOMES, 0.0))),
                "running": _count(found[w.url].get(_RUNNING, 0.0), _MAX_GAUGE),
                "healthy": _count(found[w.url].get(_HEALTH, 1.0 if w.healthy else 0.0), 1)}
        for w in listed}, _count(no_worker))


_MAX_COUNT = 2**53  # whole numbers a float and JSON carry exactly
_MAX_GAUGE = 2**31 - 1


def _count(value: float, cap: int = _MAX_COUNT) -> int:
    """A counter or gauge as a whole number in 0..cap (NaN: 0)."""
    if value != value:
        return 0
    return int(min(max(value, 0.0), float(cap)))


class _Refused(RouterAdminError):
    """An HTTP error status, with the body that says why."""

    def __init__(self, what: str, status: int, body: str) -> None:
        super().__init__(f"{what}: answered {status}: {body[:200]}")
        self.body = body


def _call(method: str, port: int, path: str, timeout_s: float,
          limit: int = MAX_REPLY_BYTES) -> str:
    what = f"{method} {path.split('?', 1)[0]}"
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=b"" if method == "POST" else None)
    try:
        with _OPENER.open(request, timeout=timeout_s) as reply:
            return reply.read(limit).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as error:
        body = error.read(4096).decode("utf-8", errors="replace").strip()
        raise _Refused(what, error.code, body) from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise RouterAdminError(f"{what}: no answer ({exc})") from None
