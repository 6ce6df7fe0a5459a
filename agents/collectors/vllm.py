"""The vLLM collector: scrapes one vLLM server's Prometheus /metrics into engine.* samples.

One server can run several engines (data parallelism, the `engine` label): each is an engine
of its own, named "vllm:<port>/<engine label>". Gauges are sent as read; counters as rates
and histograms as bucket deltas over the monotonic interval since the previous scrape, so the
first scrape has gauges only.

When a scrape fails the engines are reported {"up": 0} and the previous readings are kept:
the next good scrape then differences across the gap. Its rates are the average over the gap,
and its histogram deltas hold every request finished during it, so the server's sums stay
whole. That matters most when the scrape times out because the server is busiest.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from agents.collectors.base import Warn, WarnOnce, stderr_warn
from agents.collectors.vllm_cmdline import first_server, read_args
from agents.collectors.vllm_names import DEFAULT_ENGINE, GAUGE_KEYS
from agents.collectors.vllm_parse import EngineReadings, Memo, VllmMetricsError, parse_metrics
from agents.collectors.vllm_rates import interval_values
from agents.protocol import wire_keys

__all__ = ["Fetch", "VllmCollector", "VllmMetricsError", "http_get", "parse_metrics"]

Fetch = Callable[[str, float], str]  # (url, timeout in seconds) -> the page's text

_MAX_BYTES = 16 * 1024 * 1024  # a vLLM page is ~60 KB an engine; anything this big is not one
# The scraped server is on this host: an http_proxy from the environment must not apply.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# ValueError: a bad URL or text decode; LookupError: a charset Python does not know.
_SCRAPE_ERRORS = (OSError, http.client.HTTPException, VllmMetricsError, ValueError, LookupError)
_CATALOG = wire_keys("engine")
SIMULATED_OWNER = "pitwall-sim"  # /v1/models "owned_by" of agents/sim/vllm_server.py
_MAX_VERSION_CHARS = 64  # "0.11.0+cu128.dev123": anything longer is not a version


def http_get(url: str, timeout: float) -> str:
    with _OPENER.open(url, timeout=timeout) as response:  # raises HTTPError unless 2xx
        body = response.read(_MAX_BYTES + 1)
        charset = response.headers.get_content_charset() or "utf-8"
    if len(body) > _MAX_BYTES:
        raise VllmMetricsError(f"page larger than {_MAX_BYTES} bytes")
    return body.decode(charset, errors="replace")


def _reason(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):  # connect errors come wrapped
        if not isinstance(exc.reason, BaseException):
            return str(exc.reason)
        exc = exc.reason
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, VllmMetricsError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _port(url: str) -> int:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"vLLM metrics URL must be http(s)://host[:port]/path, not {url!r}")
    return parts.port or (443 if parts.scheme == "https" else 80)  # .port raises if bad


def _gauge(key: str, value: float) -> float:
    # Keep the catalog's bounds (kv_cache_usage 0-1): a float edge would refuse a whole batch.
    metric = _CATALOG[key]
    low = value if metric.low is None else max(metric.low, value)
    return low if metric.high is None else min(metric.high, low)


class VllmCollector:
    def __init__(self, url: str, *, timeout: float = 0.8, warn: Warn = stderr_warn,
                 fetch: Fetch | None = None, models_fetch: Fetch | None = None,
                 version_fetch: Fetch | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self.port = _port(url)  # process discovery matches the vLLM process by its port
        self.timeout = timeout
        self._fetch = fetch or http_get
        self._models_fetch = models_fetch or http_get
        # A caller that fakes /v1/models (a test) fakes /version too, or it is not asked: a
        # real request to the faked server's port could reach whatever listens there.
        self._version_fetch = version_fetch or (http_get if models_fetch is None else None)
        self._clock = clock
        self._warn = WarnOnce(warn)
        self._source = f"vllm {url}"
        self._latest: dict[str, EngineReadings] = {}  # last good scrape: names, inventory
        self._prev: dict[str, EngineReadings] = {}  # the baseline for rates
        self._prev_time: float | None = None
        self._memo: Memo = {}  # the last page's parsed blocks, reused while they repeat
        self.simulated: bool | None = None  # None until the server has said what it is
        self.version: str | None = None  # GET /version's answer; None: unasked or no answer
        self._version_due = True  # asked once per server process (again after a restart)
        self._server: tuple[int, list[str]] | None = None  # the API server's pid and argv
        self._args: tuple[tuple[Any, ...], dict[str, Any]] | None = None  # (key, args read)

    def _identify(self) -> None:
        """Ask the server once what it is: Pitwall's simulated vLLM says so in /v1/models.

        Only its own word marks an engine simulated; a server that does not answer is taken
        for a real one (it is asked once, not every interval).
        """
        models = self._ask(self._models_fetch, "/v1/models")
        try:
            self.simulated = SIMULATED_OWNER in {m.get("owned_by") for m in models["data"]}
        except (AttributeError, TypeError, KeyError):
            self.simulated = False

    def _ask(self, fetch: Fetch, path: str) -> Any:
        """The server's JSON answer at ``path`` (beside /metrics), with the scrape's timeout;
        None when it does not answer with JSON."""
        parts = urlsplit(self.url)
        try:
            return json.loads(fetch(f"{parts.scheme}://{parts.netloc}{path}", self.timeout))
        except (*_SCRAPE_ERRORS, AttributeError, TypeError):
            return None

    def _ask_version(self) -> None:
        """vLLM's API server answers GET /version with {"version": "0.x.y"}; asked once per
        server process, with the scrape's timeout. No answer: the version stays unknown."""
        self._version_due, self.version = False, None
        if self._version_fetch is None:
            return
        reply = self._ask(self._version_fetch, "/version")
        version = reply.get("version") if isinstance(reply, dict) else None
        if isinstance(version, str) and 0 < len(version.strip()) <= _MAX_VERSION_CHARS:
            self.version = version.strip()

    def note_commands(self, commands: dict[int, list[str]]) -> None:
        """The command lines of the processes listening on this server's port (pid -> argv,
        agents/collectors/process.py reads each once): the first that starts a vLLM API server
        gives the flags in effect. A new process (a restart) is asked its version again at the
        next good scrape; the old answer stands until then, so a restart alone changes
        nothing in the inventory."""
        server = first_server(commands)
        if server is None:
            return  # not readable, or not vLLM as Pitwall knows it: keep what was read before
        if self._server is not None and server[0] != self._server[0]:
            self._version_due = True
        self._server = server

    def flags(self) -> dict[str, Any]:
        """The catalog flags of the server's command line, read as its version spells them;
        read again only when the command line or the version changes."""
        if self._server is None:
            return {}
        key = (tuple(self._server[1]), self.version)
        if self._args is None or self._args[0] != key:
            self._args = (key, read_args(self._server[1], self.version) or {})
        return self._args[1]

    def engine_name(self, engine: str) -> str:
        return f"vllm:{self.port}/{engine}"

    def _engines(self) -> list[str]:
        return list(self._latest) or [DEFAULT_ENGINE]

    def collect(self) -> list[dict[str, Any]]:
        try:
            text = self._fetch(self.url, self.timeout)
            now = self._clock()
            engines = parse_metrics(text, self._memo)
        except _SCRAPE_ERRORS as exc:
            self._warn.fail(self._source, _reason(exc, self.timeout))
            return [{"name": self.engine_name(engine), "up": 0} for engine in self._engines()]
        if not engines:
            self._warn.fail(self._source, "no vllm:* metrics (server run with "
                                          "--disable-log-stats?)")
            return [{"name": self.engine_name(engine), "up": 1} for engine in self._engines()]
        self._warn.ok(self._source)
        self._latest = engines
        if self.simulated is None:
            self._identify()
        if self._version_due:
            self._ask_version()
        return self._samples(engines, now)

    def _samples(self, engines: dict[str, EngineReadings], now: float) -> list[dict[str, Any]]:
        dt = None if self._prev_time is None else now - self._prev_time
        samples = []
        for engine, readings in engines.items():
            sample: dict[str, Any] = {"name": self.engine_name(engine), "up": 1}
            sample.update((key, _gauge(key, readings.gauges[key]))
                          for key in GAUGE_KEYS if key in readings.gauges)
            prev = self._prev.get(engine)
            if prev is not None and dt is not None and dt > 0:
                sample.update(interval_values(prev, readings, dt))
            samples.append(sample)
        if dt is None or dt > 0:  # a clock that did not move keeps the older baseline
            self._prev, self._prev_time = engines, now
        return samples

    def inventory(self) -> list[dict[str, Any]]:
        """One entry per engine that collect() names, so every sample has its inventory."""
        entries = []
        for engine in self._engines():
            readings = self._latest.get(engine)
            entries.append({
                "name": self.engine_name(engine),
                "url": self.url,
                "model": readings.model if readings else None,
                "config": self._config(readings),
                "engine_index": int(engine) if engine.isdigit() else None,
                "simulated": bool(self.simulated),
            })
        return entries

    def _config(self, readings: EngineReadings | None) -> dict[str, Any]:
        """cache_config_info's labels as vLLM prints them, plus what the agent learned of the
        server: "args" (the flags it runs with) and "vllm_version", each only when known."""
        config = dict(readings.config) if readings else {}
        flags = self.flags()
        if flags:
            config["args"] = dict(flags)
        if self.version:
            config["vllm_version"] = self.version
        return config
