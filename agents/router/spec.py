"""One desired router, as the control plane sends it (the ``routers`` of the agent config).

Checked once, like the deployments (agents/supervisor/spec.py): a malformed entry is refused
with a message naming it, and nothing of that config is applied. Every worker URL must be
the plain ``scheme://host:port`` form the control plane writes: the router keeps a URL exactly
as it was added, and the agent compares the router's list with the desired one string for
string, so a form the router would store differently would be re-added on every tick.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from agents.supervisor.spec import SpecError

# The policies vllm-router 0.1.17 accepts (its --policy choices).
POLICIES = ("random", "round_robin", "cache_aware", "kv_aware", "power_of_two",
            "consistent_hash", "sticky_least_loaded")
MAX_WORKERS = 64
MAX_URL_CHARS = 300
MAX_NAME_CHARS = 300  # the service's name and model: shown in the log only
MAX_ROUTERS = 64
MAX_HOLD_S = 3600  # the control plane sends at most 600; an hour bounds the retries it means
# A host name (underscores too: some fleets name hosts so) or an IPv4 address, or an IPv6
# address in brackets: nothing the router could read as anything else.
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\]")


class RouterSpecError(SpecError):
    """A refused router entry; a SpecError, so the config is refused as for a deployment."""


@dataclass(frozen=True)
class RouterSpec:
    service_id: int
    service: str
    port: int
    policy: str
    workers: tuple[str, ...] = ()
    model: str = ""
    # How long the router holds a request while it has no worker (a service that may scale to
    # zero: the first replica is starting); 0: the router's usual retries.
    hold_s: int = 0

    @property
    def process_key(self) -> tuple[int, str, int]:
        """What the router process is started with: a change restarts it. The workers are
        not part of it: they change live."""
        return self.port, self.policy, self.hold_s

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RouterSpec:
        label = raw.get("service_id", "?") if isinstance(raw, Mapping) else "?"
        try:
            if not isinstance(raw, Mapping):
                raise RouterSpecError(f"must be an object, not {type(raw).__name__}")
            return cls(service_id=_id(raw["service_id"]),
                       service=_name(raw.get("service", ""), "service"),
                       port=_port(raw["port"]), policy=_policy(raw.get("policy")),
                       workers=_workers(raw.get("workers", [])),
                       model=_name(raw.get("model", ""), "model"),
                       hold_s=_hold(raw.get("hold_s", 0)))
        except KeyError as exc:
            raise RouterSpecError(f"router of service {label}: missing {exc.args[0]}") from None
        except SpecError as exc:
            raise RouterSpecError(f"router of service {label}: {exc}") from None


def parse_routers(routers: Any) -> dict[int, RouterSpec]:
    """Every entry parsed, keyed by service id; RouterSpecError names the first bad one."""
    if not isinstance(routers, list):
        raise RouterSpecError("routers must be a list")
    if len(routers) > MAX_ROUTERS:
        raise RouterSpecError(f"{len(routers)} routers: at most {MAX_ROUTERS}")
    specs: dict[int, RouterSpec] = {}
    ports: dict[int, int] = {}
    for raw in routers:
        spec = RouterSpec.from_dict(raw)
        if spec.service_id in specs:
            raise RouterSpecError(f"router of service {spec.service_id} is listed twice")
        if spec.port in ports:
            raise RouterSpecError(f"routers of services {ports[spec.port]} and "
                                  f"{spec.service_id} both ask for port {spec.port}")
        specs[spec.service_id], ports[spec.port] = spec, spec.service_id
    return specs


def worker_url_problem(url: Any) -> str | None:
    """Why a worker URL is refused, or None for a plain http(s)://host:port."""
    if not isinstance(url, str) or not url:
        return "a worker must be a non-empty string"
    if len(url) > MAX_URL_CHARS:
        return f"worker URL of {len(url)} characters: at most {MAX_URL_CHARS}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"worker {url[:80]!r} is not a URL with a valid port"
    host = parts.netloc.rsplit(":", 1)[0]
    if (parts.scheme not in ("http", "https") or port is None or not 1 <= port <= 65535
            or not _HOST.fullmatch(host) or url != f"{parts.scheme}://{host}:{port}"):
        return f"worker {url[:80]!r} is not of the form http(s)://host:port"
    return None


def _workers(values: Any) -> tuple[str, ...]:
    if not isinstance(values, list):
        raise RouterSpecError("workers must be a list of URLs")
    if len(values) > MAX_WORKERS:
        raise RouterSpecError(f"{len(values)} workers: at most {MAX_WORKERS}")
    for url in values:
        if problem := worker_url_problem(url):
            raise RouterSpecError(problem)
    if len(set(values)) != len(values):
        raise RouterSpecError("a worker is listed twice")
    return tuple(values)


def _id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RouterSpecError(f"service_id must be a positive integer, not {value!r}")
    return value


def _port(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise RouterSpecError(f"port must be an integer in 1-65535, not {value!r}")
    return value


def _hold(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_HOLD_S:
        raise RouterSpecError(f"hold_s must be an integer in 0-{MAX_HOLD_S}, not "
                              f"{repr(value)[:40]}")
    return value


def _policy(value: Any) -> str:
    if value not in POLICIES:
        shown = repr(value)[:40]
        raise RouterSpecError(f"policy {shown} is not one of {', '.join(POLICIES)}")
    return value


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS:
        raise RouterSpecError(f"{field} must be a string of at most {MAX_NAME_CHARS} "
                              "characters")
    return value
