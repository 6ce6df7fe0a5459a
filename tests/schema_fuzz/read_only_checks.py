"""A schemathesis check for the fuzz run with a read-only API token (loaded through
SCHEMATHESIS_HOOKS): whatever the input, an unsafe method is refused. Read-only means no
writes on every endpoint (docs/security.md, "Tokens")."""

from __future__ import annotations

import schemathesis

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
# The agent's own endpoints take agent tokens only: a user token is unauthenticated there.
AGENT_PREFIX = "/api/v1/agent/"


@schemathesis.check
def read_only_token_writes_nothing(ctx, response, case) -> None:
    if case.method.upper() not in UNSAFE:
        return
    expected = 401 if case.path.startswith(AGENT_PREFIX) else 403
    if response.status_code == expected or _no_route(response):
        return
    # The coverage phase also sends methods the schema does not list (PUT /metrics): no
    # handler runs, and 405 says so.
    if case.method.upper() != case.operation.method.upper() and response.status_code == 405:
        return
    raise AssertionError(f"{case.method.upper()} {case.path} with a read-only token answered "
                         f"{response.status_code}, not {expected}: {response.text[:200]}")


def _no_route(response) -> bool:
    """Django's own 404 page: the URL names no endpoint (an id that is not an integer), so
    no view ran. A view's 404 is JSON, and would mean the scope was not checked first."""
    kind = response.headers.get("content-type", [""])  # lower-case keys, list values
    kind = kind[0] if isinstance(kind, list) else kind
    return response.status_code == 404 and not kind.startswith("application/json")
