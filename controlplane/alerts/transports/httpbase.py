"""One HTTP POST, classified: the base of every webhook transport.

One attempt per ``notify``: the caller (a Celery task) owns the backoff. Outcomes:
2xx succeeds; connection errors, timeouts, 408, 429 and 5xx are retryable; other 3xx/4xx, a bad
URL or a refused address are permanent. Redirects are not followed: a redirect could lead
past the private-address check.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import socket
import ssl
import time
from typing import Any, ClassVar
from urllib.parse import urlsplit

from django.conf import settings

from .base import ConfigError, DeliveryResult, Transport, TransportError, attempt_timeout
from .message import Notification

USER_AGENT = "Pitwall-Alerts/1"
EXCERPT_CHARS = 200
RETRYABLE_STATUSES = {408, 429}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def allow_private_webhooks() -> bool:
    # Read at call time so an operator's change (and a test's) takes effect without a restart.
    return bool(getattr(settings, "PITWALL", {}).get("ALERT_ALLOW_PRIVATE_WEBHOOKS", False))


def validate_url(config: dict[str, Any], field: str = "url") -> str:
    url = config.get(field)
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(field, "required")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ConfigError(field, "must be an http:// or https:// URL")
    try:
        parts.port  # noqa: B018 -- raises on a bad port
    except ValueError as exc:
        raise ConfigError(field, "has an invalid port") from exc
    if not parts.hostname:
        raise ConfigError(field, "has no host")
    return url.strip()


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """HMAC-SHA256 over ``f"{timestamp}.{body}"``, hex; docs/webhooks.md shows the check."""
    signed = timestamp.encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


# IPv6 prefixes refused outright, whatever Python's ipaddress thinks of them (its notion of
# "global" changed between versions): 6to4 (deprecated, RFC 7526; a relay delivers to the IPv4
# inside), site-local (deprecated private addressing, RFC 3879), Teredo (a tunnel to the IPv4
# inside), NAT64's local-use prefix (RFC 8215), discard-only, documentation, ORCHIDv2.
REFUSED_V6 = tuple(ipaddress.IPv6Network(net) for net in (
    "2002::/16", "fec0::/10", "2001::/32", "64:ff9b:1::/48", "100::/64", "2001:db8::/32",
    "2001:20::/28"))
# NAT64's well-known prefix (RFC 6052): the translator connects to the IPv4 in the low 32 bits.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# IPv4-compatible addresses (::a.b.c.d, deprecated): the IPv4 in the low 32 bits.
COMPAT = ipaddress.IPv6Network("::/96")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form leads to: mapped, compatible, NAT64, 6to4, Teredo."""
    if ip.ipv4_mapped:
        return ip.ipv4_mapped
    if ip.sixtofour:
        return ip.sixtofour
    if ip.teredo:
        return ip.teredo[1]  # the client; the server is refused with the prefix anyway
    if ip in NAT64 or (ip in COMPAT and int(ip) > 1):  # :: and ::1 are themselves
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_refused(ip: Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_site_local or any(ip in net for net in REFUSED_V6):
            return True
        inner = embedded_ipv4(ip)
        if ip.ipv4_mapped:  # only the IPv4 is ever connected to
            return _refused(ip.ipv4_mapped)
        if inner is not None and _refused(inner):
            return True
    return _refused(ip)


def _refused(ip: Address) -> bool:
    return (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global  # shared address space (100.64/10) and the like
    )


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, each checked: one private answer refuses them all."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        # Often a passing DNS failure: retryable; a name that never resolves keeps failing.
        raise TransportError(f"cannot resolve {host}: {exc.strerror}") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not allow_private_webhooks():
        for address in addresses:
            if is_refused(ipaddress.ip_address(address.split("%")[0])):
                raise TransportError(
                    f"refused: {host} resolves to the private or reserved address {address}",
                    permanent=True,
                )
    return addresses


class PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to an address checked beforehand, so DNS cannot change between check and use."""

    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(
        self, host: str, port: int, address: str, timeout: float, tls: ssl.SSLContext | None
    ):
        self.tls = tls or ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        # The certificate is checked against the URL's host name, not the pinned address.
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


def excerpt(body: bytes) -> str:
    text = " ".join(body.decode("utf-8", "replace").split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    timeout: float,
    tls: ssl.SSLContext | None = None,
) -> DeliveryResult:
    parts = urlsplit(url)
    # The error is stored and shown; a webhook URL often carries its secret (Slack's path,
    # a ?token=), so it names the scheme and host only.
    shown = f"{parts.scheme or '?'}://{parts.hostname or '?'}/…"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TransportError(f"invalid URL {shown}", permanent=True)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise TransportError(f"invalid URL {shown}: bad port", permanent=True) from exc
    conn = connect(parts.scheme, parts.hostname, port, timeout, tls)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        return classify(response.status, response.read(4096), response.getheader("Retry-After"))
    except TimeoutError as exc:
        raise TransportError(f"timed out after {timeout:g} s") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise TransportError(f"connection failed: {exc!r}") from exc
    finally:
        conn.close()


def connect(
    scheme: str, host: str, port: int, timeout: float, tls: ssl.SSLContext | None
) -> http.client.HTTPConnection:
    """A connection to the first checked address that answers.

    Only connecting moves on to the next address: once a request is sent, trying it elsewhere
    could deliver it twice.
    """
    error: OSError | None = None
    for address in resolve(host, port):
        conn: http.client.HTTPConnection
        if scheme == "https":
            conn = PinnedHTTPSConnection(host, port, address, timeout, tls)
        else:
            conn = PinnedHTTPConnection(host, port, address, timeout)
        try:
            conn.connect()
            return conn
        except TimeoutError as exc:
            raise TransportError(f"timed out connecting after {timeout:g} s") from exc
        except ssl.SSLCertVerificationError as exc:
            raise TransportError(f"TLS certificate rejected: {exc.verify_message}") from exc
        except OSError as exc:
            conn.close()
            error = exc
    raise TransportError(f"connection failed: {error}")


def classify(status: int, body: bytes, retry_after: str | None) -> DeliveryResult:
    reason = f"HTTP {status}: {excerpt(body)}".rstrip(": ")
    if 200 <= status < 300:
        return DeliveryResult(detail=reason, status_code=status)
    retryable = status in RETRYABLE_STATUSES or status >= 500
    delay = int(retry_after) if retry_after and retry_after.strip().isdigit() else None
    raise TransportError(reason, permanent=not retryable, status_code=status, retry_after=delay)


class HttpTransport(Transport):
    """Subclasses say what to send (``payload``); this class sends it once and classifies."""

    requires_secret: ClassVar[bool] = False

    def __init__(self, timeout: float | None = None, tls: ssl.SSLContext | None = None):
        # None: the setting ALERT_DELIVERY_TIMEOUT_S (base.attempt_timeout).
        self.timeout = attempt_timeout() if timeout is None else timeout
        # None: the system's trusted CAs. A context of its own serves a private CA.
        self.tls = tls

    def validate_config(self, config: dict[str, Any]) -> dict[str, Any]:
        cleaned: dict[str, Any] = {"url": validate_url(config)}
        secret = config.get("secret")
        if secret is not None and not isinstance(secret, str):
            raise ConfigError("secret", "must be a string")
        if secret:
            cleaned["secret"] = secret
        elif self.requires_secret:
            raise ConfigError("secret", "required: receivers check the signature with it")
        return cleaned

    def payload(self, config: dict[str, Any], message: Notification) -> dict[str, Any]:
        raise NotImplementedError

    def checked(self, channel_config: dict[str, Any]) -> dict[str, Any]:
        """The cleaned config; a stored config that no longer passes fails for good."""
        try:
            return self.validate_config(channel_config)
        except ConfigError as exc:
            raise TransportError(f"invalid channel configuration: {exc}", permanent=True) from exc

    def notify(self, channel_config: dict[str, Any], message: Notification) -> DeliveryResult:
        config = self.checked(channel_config)
        body = json.dumps(self.payload(config, message), separators=(",", ":")).encode()
        headers = self.headers(config, message, body)
        return post(config["url"], body, headers, self.timeout, self.tls)

    def headers(self, config: dict[str, Any], message: Notification, body: bytes) -> dict[str, str]:
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "X-Pitwall-Notification-Id": message.id,
            "X-Pitwall-Timestamp": timestamp,
        }
        if config.get("secret"):
            headers["X-Pitwall-Signature"] = "v1=" + sign(config["secret"], timestamp, body)
        return headers
