"""Who may write what: agent tokens and each host's GPU and engine ids, cached in-process.

The hot path needs, per request, the host behind a token and the ids of the GPUs and engines a
batch names. Both change rarely, so they are cached here and read from the database (through
the ORM, in a thread) at start, on a miss, on a new inventory, and every ``TOKEN_TTL_S`` for
the whole token table (one query).

The cache only answers who a token is. Whether it is still good is checked again in the
transaction of every write (credentials.py): a revoked or expired token is refused from the
very next batch, in every process, whatever revoked it; ``refuse`` then records it here, so
its later requests are refused at the door. An expiry passed is also refused at the door.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from django.db import DatabaseError, transaction
from django.db.models import Q

from controlplane.fleet.inventory import GpuOwnedElsewhere, apply_inventory, digest
from controlplane.fleet.models import AgentToken, Engine, Gpu, Host
from controlplane.lib import tokens
from controlplane.telemetry.ingest import credentials
from controlplane.telemetry.ingest.credentials import TokenRefused, check_token
from controlplane.telemetry.ingest.errors import BadRequest, join
from controlplane.telemetry.ingest.orm import orm
from controlplane.telemetry.ingest.validate import Batch

# The token table is reloaded this often: new tokens are found sooner (on a miss), and a
# revocation is enforced at once by the write-time check (credentials.py).
TOKEN_TTL_S = 30.0
# Every host's config_version is reloaded this often (one query of two integer columns): a
# deployment changed in the API reaches its agent's next reply within this time.
CONFIG_TTL_S = 2.0
# Past this many CONFIG_TTL_S a request waits for the reload instead of starting it behind.
CONFIG_STALE_TTLS = 3
MAX_UNKNOWN_TOKENS = 10_000
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Credential:
    """What the cache knows of one agent token."""

    token_id: int
    host_id: int
    refused: str = ""  # why it is refused (revoked), "" while it is good
    expires: float = float("inf")  # unix seconds


def _credential(token_id: int, host_id: int, revoked_at, expires_at) -> Credential:
    return Credential(token_id, host_id, credentials.REVOKED if revoked_at else "",
                      expires_at.timestamp() if expires_at else float("inf"))


@dataclass
class HostState:
    host_id: int
    hostname: str
    inventory_digest: str
    gpu_ids: dict[str, int]
    engine_ids: dict[str, int]
    # When ingest last wrote last_seen, to write it at most every few seconds (writer.py).
    last_seen_written: float = 0.0
    engines_seen_written: dict[int, float] = field(default_factory=dict)


def _load_token(lookup: str) -> AgentToken | None:
    return AgentToken.objects.filter(lookup=lookup).first()


def _load_tokens() -> dict[str, Credential]:
    rows = AgentToken.objects.values_list("digest", "id", "host_id", "revoked_at", "expires_at")
    return {digest: _credential(*rest) for digest, *rest in rows}


@transaction.atomic
def _apply_checked(token_id: int | None, host_id: int, inventory: dict,
                   agent_version: str) -> None:
    """An inventory is a write too: only while the token is good."""
    check_token(token_id)
    apply_inventory(host_id, inventory, agent_version)


def _load_hosts(host_ids: list[int] | None = None) -> dict[int, HostState]:
    """Hosts with their GPU and engine ids: every host (at start) or the ones named."""
    hosts, gpu_rows, engine_rows = Host.objects.all(), Gpu.objects.all(), Engine.objects.all()
    if host_ids is not None:
        hosts = hosts.filter(id__in=host_ids)
        gpu_rows = gpu_rows.filter(host_id__in=host_ids)
        engine_rows = engine_rows.filter(host_id__in=host_ids)
    gpus: dict[int, dict[str, int]] = {}
    for host_id, uuid, gpu_id in gpu_rows.values_list("host_id", "uuid", "id"):
        gpus.setdefault(host_id, {})[uuid] = gpu_id
    engines: dict[int, dict[str, int]] = {}
    for host_id, name, engine_id in engine_rows.values_list("host_id", "name", "id"):
        engines.setdefault(host_id, {})[name] = engine_id
    return {
        host_id: HostState(host_id, hostname, digest, gpus.get(host_id, {}),
                           engines.get(host_id, {}))
        for host_id, hostname, digest in hosts.values_list("id", "hostname", "inventory_digest")
    }


def _load_config_versions() -> tuple[dict[int, int], set[int]]:
    """Hosts' config versions, and the hosts without an inventory digest: none applied yet,
    or one cleared by an administrator (inventory.move_gpu) to have it checked again."""
    rows = Host.objects.filter(Q(config_version__gt=0) | Q(inventory_digest="")).values_list(
        "id", "config_version", "inventory_digest")
    return ({host_id: version for host_id, version, _ in rows if version},
            {host_id for host_id, _, inventory in rows if not inventory})


def _load_host(host_id: int) -> HostState:
    state = _load_hosts([host_id]).get(host_id)
    if state is None:
        raise Host.DoesNotExist(f"no host with id {host_id}")
    return state


class Registry:
    def __init__(self, wall_clock: Callable[[], float] = time.time) -> None:
        # Unix seconds, for the tokens' expiry at the door (tests set a clock of their own).
        self.wall_clock = wall_clock
        # Every agent token's HMAC digest -> Credential: reloaded whole, in one query, every
        # TOKEN_TTL_S, so the hot path never queries per request or per token.
        self._tokens: dict[str, Credential] = {}
        self._tokens_loaded = -float("inf")
        self._refresh_lock = asyncio.Lock()
        self._tokens_task: asyncio.Task | None = None
        self._unknown_tokens: set[str] = set()  # digests looked up and not found since reload
        self._hosts: dict[int, HostState] = {}
        self._versions: dict[int, int] = {}
        self._versions_loaded = -float("inf")
        self._versions_lock = asyncio.Lock()
        self._versions_task: asyncio.Task | None = None

    async def warm(self) -> None:
        """Load the token table and every host's devices at start, in a handful of queries."""
        await self._refresh_tokens()
        self._hosts.update(await orm(_load_hosts)())

    async def _refresh_tokens(self) -> None:
        async with self._refresh_lock:
            if time.monotonic() - self._tokens_loaded < TOKEN_TTL_S:
                return  # another request refreshed while this one waited
            self._tokens = await orm(_load_tokens)()
            self._unknown_tokens.clear()
            self._tokens_loaded = time.monotonic()

    async def authenticate(self, header: bytes | None) -> Credential:
        """The token's credential (host and token id), or a 401 BadRequest."""
        raw = tokens.bearer(header)
        if raw is None:
            raise BadRequest("an agent token is required: Authorization: Bearer <token>",
                             status=401)
        parsed = tokens.parse(raw)
        if parsed is None or parsed.kind != tokens.AGENT:
            raise BadRequest("not a Pitwall agent token", status=401)
        age = time.monotonic() - self._tokens_loaded
        if age >= CONFIG_STALE_TTLS * TOKEN_TTL_S:
            await self._refresh_tokens()
        elif age >= TOKEN_TTL_S and (self._tokens_task is None or self._tokens_task.done()):
            # Behind the request, as the config versions: a revocation is enforced at the
            # write anyway (credentials.py), and a new token is looked up on its first miss.
            self._tokens_task = asyncio.create_task(self._refresh_in_background())
        entry = self._tokens.get(parsed.digest)
        if entry is None and parsed.digest not in self._unknown_tokens:
            entry = await self._lookup_new_token(parsed)
        if entry is None:
            raise BadRequest(credentials.UNKNOWN, status=401)
        if entry.refused:
            raise TokenRefused(entry.token_id, entry.refused)
        if self.wall_clock() >= entry.expires:
            raise TokenRefused(entry.token_id, credentials.EXPIRED)
        return entry

    async def _refresh_in_background(self) -> None:
        try:
            await self._refresh_tokens()
        except DatabaseError as exc:
            log.warning("ingest could not reload agent tokens: %s", exc)

    def refuse(self, token_id: int, why: str) -> None:
        """A write found this token revoked, expired or gone: refuse it at the door from now."""
        for key, entry in self._tokens.items():
            if entry.token_id == token_id:
                self._tokens[key] = Credential(token_id, entry.host_id, why, entry.expires)

    async def _lookup_new_token(self, parsed: tokens.ParsedToken) -> Credential | None:
        """A token issued since the last reload; misses are remembered until the next one."""
        token = await orm(_load_token)(parsed.lookup)
        if token is None or not tokens.matches(token.digest, parsed):
            if len(self._unknown_tokens) < MAX_UNKNOWN_TOKENS:  # random tokens cost no memory
                self._unknown_tokens.add(parsed.digest)
            return None
        entry = _credential(token.id, token.host_id, token.revoked_at, token.expires_at)
        self._tokens[parsed.digest] = entry
        return entry

    async def config_version(self, host_id: int) -> int:
        """The host's desired-config version, reloaded every CONFIG_TTL_S.

        The reload runs in the background while the cached versions are less than
        CONFIG_STALE_TTLS reloads old: requests do not queue behind it. Waiting for it made
        every request of a loaded server stall for the query's time every 2 s (traced as
        seconds of p99 in the "prepare" step when PostgreSQL was slow).
        """
        age = time.monotonic() - self._versions_loaded
        if age >= CONFIG_STALE_TTLS * CONFIG_TTL_S:
            await self._reload_versions()
        elif age >= CONFIG_TTL_S and (self._versions_task is None or self._versions_task.done()):
            self._versions_task = asyncio.create_task(self._reload_in_background())
        return self._versions.get(host_id, 0)

    async def _reload_versions(self) -> None:
        async with self._versions_lock:
            if time.monotonic() - self._versions_loaded >= CONFIG_TTL_S:
                self._versions, cleared = await orm(_load_config_versions)()
                self._versions_loaded = time.monotonic()
                self._forget_cleared(cleared)

    async def _reload_in_background(self) -> None:
        try:
            await self._reload_versions()
        except DatabaseError as exc:  # the next request past the stale bound reloads inline
            log.warning("ingest could not reload config versions: %s", exc)

    def _forget_cleared(self, cleared: set[int]) -> None:
        """Drop the cached devices of hosts whose inventory digest was cleared since: their
        next inventory is applied (and checked) again, and a GPU moved away is no longer
        theirs in this process."""
        for host_id in cleared:
            state = self._hosts.get(host_id)
            if state is not None and state.inventory_digest:
                del self._hosts[host_id]

    def engine_ids(self, host_id: int) -> Collection[int]:
        """The ids of the host's engines this process knows (none before its first batch)."""
        state = self._hosts.get(host_id)
        return state.engine_ids.values() if state is not None else ()

    async def host(self, host_id: int) -> HostState:
        state = self._hosts.get(host_id)
        if state is None:
            state = await orm(_load_host)(host_id)
            self._hosts[host_id] = state
        return state

    async def prepare(self, host_id: int, batch: Batch,
                      token_id: int | None = None) -> HostState:
        """Apply the batch's inventory if new; check that it names only this host's devices."""
        state = await self.host(host_id)
        if batch.inventory is not None:
            await self._apply(state, batch, token_id)
            state = self._hosts[host_id]
        if self._unknown(state, batch) is not None:
            # Another worker process may have applied an inventory we have not seen.
            state = await orm(_load_host)(host_id)
            self._hosts[host_id] = state
            missing = self._unknown(state, batch)
            if missing is not None:
                raise BadRequest(
                    f"unknown to this server for host {state.hostname}: send the inventory "
                    "(\"host\") with this batch", join(batch.path, missing), status=409)
        return state

    async def _apply(self, state: HostState, batch: Batch, token_id: int | None) -> None:
        inventory = batch.inventory or {}
        if inventory["hostname"] != state.hostname:
            raise BadRequest(
                f"this token writes host {state.hostname!r}, not {inventory['hostname']!r}",
                join(batch.path, "host.hostname"), status=403)
        if digest(inventory) == state.inventory_digest:
            return
        try:
            await orm(_apply_checked)(
                token_id, state.host_id, inventory, batch.agent_version)
        except GpuOwnedElsewhere as exc:
            raise BadRequest(str(exc), join(batch.path, f"host.gpus[{exc.index}].uuid"),
                             status=403) from None
        fresh = await orm(_load_host)(state.host_id)
        fresh.last_seen_written = state.last_seen_written
        self._hosts[state.host_id] = fresh

    @staticmethod
    def _unknown(state: HostState, batch: Batch) -> str | None:
        """The field path of the first GPU or engine this host does not have, if any."""
        if not hasattr(batch, "samples"):  # protocol v2 (columns.Columns)
            return batch.unknown_device(state.gpu_ids, state.engine_ids)  # type: ignore[attr-defined]
        for i, sample in enumerate(batch.samples):
            for j, gpu in enumerate(sample.get("gpus") or ()):
                if gpu["uuid"] not in state.gpu_ids:
                    return f"samples[{i}].gpus[{j}].uuid"
            for j, engine in enumerate(sample.get("engines") or ()):
                if engine["name"] not in state.engine_ids:
                    return f"samples[{i}].engines[{j}].name"
        return None
