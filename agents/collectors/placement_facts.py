"""What a host tells placement about itself: labels, its address, its ports, its roles, its
cached models. The bounds live here once: the agent's command line refuses what the control
plane would refuse (controlplane/telemetry/ingest/inventory_schema.py imports these), so an
operator hears of a bad --label at start rather than from a 400 on every batch.

Every pattern is fixed and anchored; no user input is ever compiled into one.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Mapping
from urllib.parse import urlsplit

# As Kubernetes' label keys and values, less the uppercase in keys (a selector matches exactly).
LABEL_KEY = re.compile(r"[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?")
LABEL_VALUE = re.compile(r"[A-Za-z0-9._-]{0,63}")
MAX_LABELS = 32
# A DNS name (RFC 1123 labels): where other hosts (the router) reach this host's servers.
DNS_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                      r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
MAX_ADDRESS_CHARS = 253
DEFAULT_PORT_RANGE = (8000, 8999)
ROLES = ("router",)  # what the agent may serve beside vLLM deployments
# Hugging Face repo ids: "org/name" or "name", each part as the Hub allows (96 characters).
HF_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")
MAX_HF_MODELS = 256
MAX_MODEL_BYTES = 2**60  # 1 EiB: more than any cache holds


def label_problem(key: object, value: object) -> str | None:
    """Why key=value is not a label, or None when it is one."""
    if not isinstance(key, str) or not LABEL_KEY.fullmatch(key):
        return (f"label key {str(key)[:80]!r} must be 1-63 characters of a-z 0-9 . _ / -, "
                "starting and ending with a letter or digit")
    if not isinstance(value, str):
        return f"label {key}: the value must be a string, not {type(value).__name__}"
    if not LABEL_VALUE.fullmatch(value):
        return (f"label {key}: value {str(value)[:80]!r} must be at most 63 characters of "
                "A-Z a-z 0-9 . _ -")
    return None


def address_problem(address: object) -> str | None:
    """Why this is not an address other hosts can put in a URL, or None."""
    if not isinstance(address, str) or not 0 < len(address) <= MAX_ADDRESS_CHARS:
        return f"must be an IP address or a DNS name of 1-{MAX_ADDRESS_CHARS} characters"
    if "%" not in address:  # a scoped IPv6 address means nothing on another host
        try:
            ipaddress.ip_address(address)
            return None
        except ValueError:
            pass
    if DNS_NAME.fullmatch(address) and not address.replace(".", "").isdigit():
        return None
    return f"{address[:80]!r} is neither an IP address nor a DNS name"


def port_range_problem(low: object, high: object) -> str | None:
    if type(low) is not int or type(high) is not int or not 1 <= low <= high <= 65535:
        return f"must be two ports LOW-HIGH with 1 <= LOW <= HIGH <= 65535, got {low}-{high}"
    return None


def parse_port_range(text: str) -> tuple[int, int]:
    """"8000-8999" -> (8000, 8999); ValueError says what is wrong."""
    low, sep, high = text.strip().partition("-")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise ValueError(f"expected LOW-HIGH, e.g. 8000-8999, not {text[:40]!r}")
    pair = int(low), int(high)
    problem = port_range_problem(*pair)
    if problem:
        raise ValueError(problem)
    return pair


def parse_label(text: str) -> tuple[str, str]:
    """"pool=batch" -> ("pool", "batch"); ValueError says what is wrong."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"expected key=value, not {text[:80]!r}")
    problem = label_problem(key, value)
    if problem:
        raise ValueError(problem)
    return key, value


def default_address(server: str | None, hostname: str | None = None) -> str | None:
    """The local address this host reaches the control plane from (a UDP socket's connect
    picks the route and the source address without sending a packet), else the hostname; None
    when neither is an address others could use."""
    for candidate in (_source_address(server), hostname or socket.gethostname()):
        if candidate and address_problem(candidate) is None:
            return candidate
    return None


def _source_address(server: str | None) -> str | None:
    if not server:
        return None
    parts = urlsplit(server)
    host = parts.hostname
    if not host:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except (OSError, ValueError, UnicodeError):
        return None  # unresolvable now: the hostname stands in until the next inventory
    for family, kind, proto, _, target in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.connect(target)
                source = probe.getsockname()[0]
        except OSError:
            continue
        if not ipaddress.ip_address(source.split("%")[0]).is_unspecified:
            return source.split("%")[0]
    return None


def clean_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels as the wire carries them (a copy, sorted for a stable inventory digest)."""
    return {key: labels[key] for key in sorted(labels)}
