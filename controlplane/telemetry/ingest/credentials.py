"""Is an agent token still good? Checked in the transaction of every write ingest makes.

The registry (registry.py) caches the token table, so a request is authenticated without a
query. A revocation or an expiry must still stop the very next batch, in every ingest process:
so each transaction that writes for an agent (the writer's flush, an inventory, new histogram
layouts) first reads the state of the tokens it writes for, one indexed query for the whole
flush. A token revoked or expired before that read is refused (401) and nothing of its batch is
stored; the registry then refuses it at the door without any query.
"""

from __future__ import annotations

from django.db import connection

from controlplane.fleet.models import AgentToken
from controlplane.telemetry.ingest.errors import BadRequest

TABLE = AgentToken._meta.db_table

# Per token id: revoked, expired (by the database's clock). A missing id: the token is gone.
STATE_SQL = (
    f"SELECT id, revoked_at IS NOT NULL, expires_at IS NOT NULL AND expires_at <= now()"
    f" FROM {TABLE} WHERE id = ANY(%s)")

REVOKED = "this agent token was revoked"
EXPIRED = "this agent token has expired"
UNKNOWN = "unknown agent token"


class TokenRefused(BadRequest):
    """The agent token is revoked, expired or deleted: 401, nothing stored."""

    def __init__(self, token_id: int, message: str) -> None:
        super().__init__(message, status=401)
        self.token_id = token_id


def refusals(token_ids: list[int], rows: list[tuple[int, bool, bool]]) -> dict[int, str]:
    """Token id -> why it is refused, for the ids of ``token_ids`` that are not good now."""
    found = {token_id: (revoked, expired) for token_id, revoked, expired in rows}
    refused = {}
    for token_id in token_ids:
        state = found.get(token_id)
        if state is None:
            refused[token_id] = UNKNOWN
        elif state[0]:
            refused[token_id] = REVOKED
        elif state[1]:
            refused[token_id] = EXPIRED
    return refused


def check_token(token_id: int | None) -> None:
    """Raises TokenRefused unless the token is good now (sync, Django's connection; call it in
    the transaction that writes). ``None``: an internal caller with no token, not checked."""
    if token_id is None:
        return
    with connection.cursor() as cursor:
        cursor.execute(STATE_SQL, [[token_id]])
        why = refusals([token_id], cursor.fetchall()).get(token_id)
    if why:
        raise TokenRefused(token_id, why)
