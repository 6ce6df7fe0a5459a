"""Bearer tokens: a readable prefix, a lookup id and a secret; only an HMAC is stored.

Format: ``pw<kind>_<lookup>_<secret>`` e.g. ``pwa_3f9c2a1b_…`` for an agent token. The lookup
id finds the row with an index; the HMAC of the whole token is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from django.conf import settings

AGENT = "a"
USER = "u"


@dataclass(frozen=True)
class ParsedToken:
    kind: str
    lookup: str
    digest: str


def new_token(kind: str) -> tuple[str, str, str]:
    """Returns (token to show once, lookup id, digest to store)."""
    lookup = secrets.token_hex(4)
    token = f"pw{kind}_{lookup}_{secrets.token_urlsafe(32)}"
    return token, lookup, digest_of(token)


def digest_of(token: str) -> str:
    key = settings.TOKEN_HASH_KEY.encode()
    return hmac.new(key, token.encode(), hashlib.sha256).hexdigest()


def parse(token: str) -> ParsedToken | None:
    """None when the text cannot be a Pitwall token (no database lookup needed)."""
    parts = token.split("_", 2)
    if len(parts) != 3 or len(parts[0]) != 3 or not parts[0].startswith("pw"):
        return None
    kind, lookup = parts[0][2], parts[1]
    if kind not in (AGENT, USER) or len(lookup) != 8:
        return None
    return ParsedToken(kind, lookup, digest_of(token))


def matches(stored_digest: str, parsed: ParsedToken) -> bool:
    return hmac.compare_digest(stored_digest, parsed.digest)


def bearer(header: str | bytes | None) -> str | None:
    """The token from an ``Authorization: Bearer …`` header value."""
    if not header:
        return None
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()
