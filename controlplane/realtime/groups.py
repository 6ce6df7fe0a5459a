"""Live groups: what a browser may subscribe to, and their channel-layer names.

Browsers name groups ``fleet``, ``host:<id>`` and ``engine:<id>``; on the channel layer they
are ``fleet``, ``host.<id>`` and ``engine.<id>`` (Channels group names allow dots, not colons).
"""

from __future__ import annotations

from channels.db import database_sync_to_async

from controlplane.fleet.models import Engine, Host

FLEET = "fleet"
MAX_GROUPS = 64  # per socket: a page shows one host or engine and the fleet, never hundreds
_KINDS = {"host": Host, "engine": Engine}
_INT4_MAX = 2**31 - 1
FORMS = "use fleet, host:<id> or engine:<id>"


def host_group(host_id: int) -> str:
    return f"host.{host_id}"


def engine_group(engine_id: int) -> str:
    return f"engine.{engine_id}"


def parse(name: object) -> tuple[str, int | None] | str:
    """(kind, id) for a well-formed client group name, else the reason it is refused."""
    if name == FLEET:
        return FLEET, None
    if not isinstance(name, str) or name.count(":") != 1:
        return f"unknown group; {FORMS}"
    kind, _, ident = name.partition(":")
    if kind not in _KINDS:
        return f"unknown group kind {kind!r}; {FORMS}"
    if not (ident.isascii() and ident.isdigit() and 0 < int(ident) <= _INT4_MAX):
        return f"{kind} ids are positive integers"
    return kind, int(ident)


@database_sync_to_async
def _existing(wanted: dict[str, set[int]]) -> dict[str, set[int]]:
    """The ids of each kind that exist: one query per kind asked for."""
    found: dict[str, set[int]] = {kind: set() for kind in _KINDS}
    for kind, ids in wanted.items():
        if ids:
            found[kind] = set(
                _KINDS[kind].objects.filter(id__in=ids).values_list("id", flat=True))
    return found


async def resolve(names: list) -> tuple[dict[str, str], dict[str, str]]:
    """(accepted: client name -> layer name, denied: client name -> reason), in one query
    per kind; names past ``MAX_GROUPS`` are denied unread."""
    parsed: dict[str, tuple[str, int | None]] = {}
    denied: dict[str, str] = {}
    for name in names:
        key = name if isinstance(name, str) else repr(name)
        if key in parsed or key in denied:
            continue
        if len(parsed) >= MAX_GROUPS:
            denied[key] = f"more than {MAX_GROUPS} groups on one socket"
            continue
        result = parse(name)
        if isinstance(result, str):
            denied[key] = result
        else:
            parsed[key] = result
    wanted: dict[str, set[int]] = {kind: set() for kind in _KINDS}
    for kind, ident in parsed.values():
        if ident is not None:
            wanted[kind].add(ident)
    found = await _existing(wanted)
    accepted = {}
    for key, (kind, ident) in parsed.items():
        if ident is None:
            accepted[key] = FLEET
        elif ident in found[kind]:
            accepted[key] = f"{kind}.{ident}"
        else:
            denied[key] = f"no such {kind}"
    return accepted, denied
