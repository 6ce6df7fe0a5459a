"""Who may write what: agent tokens and each host's GPU and engine ids, cached in-process.

The hot path needs, per request, the host behind a token and the ids of the GPUs and engines a
batch names. Both change rarely, so they are cached here and read from the database (through
the ORM, in a thread) only on a miss, a new inventory, or after ``TOKEN_TTL_S`` for tokens —
so a revoked token stops working within that many seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async

from controlplane.fleet.inventory import GpuOwnedElsewhere, apply_inventory, digest
from controlplane.fleet.models import AgentToken, Engine, Gpu, Host
from controlplane.lib import tokens
from controlplane.telemetry.ingest.errors import BadRequest, join
from controlplane.telemetry.ingest.validate import Batch

TOKEN_TTL_S = 30.0


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
    return AgentToken.objects.select_related("host").filter(lookup=lookup).first()


def _load_host(host_id: int) -> HostState:
    host = Host.objects.get(pk=host_id)
    return HostState(
        host_id=host.id,
        hostname=host.hostname,
        inventory_digest=host.inventory_digest,
        gpu_ids=dict(Gpu.objects.filter(host_id=host_id).values_list("uuid", "id")),
        engine_ids=dict(Engine.objects.filter(host_id=host_id).values_list("name", "id")),
    )


class Registry:
    def __init__(self) -> None:
        self._tokens: dict[str, tuple[float, int | None]] = {}  # digest -> (expiry, host_id)
        self._hosts: dict[int, HostState] = {}

    async def authenticate(self, header: bytes | None) -> int:
        """The host id an agent token may write, or a 401/403 BadRequest."""
        raw = tokens.bearer(header)
        if raw is None:
            raise BadRequest("an agent token is required: Authorization: Bearer <token>",
                             status=401)
        parsed = tokens.parse(raw)
        if parsed is None or parsed.kind != tokens.AGENT:
            raise BadRequest("not a Pitwall agent token", status=401)
        cached = self._tokens.get(parsed.digest)
        if cached is not None and cached[0] > time.monotonic():
            host_id = cached[1]
        else:
            token = await sync_to_async(_load_token)(parsed.lookup)
            valid = token is not None and tokens.matches(token.digest, parsed)
            if valid and token.revoked_at is not None:
                raise BadRequest("this agent token was revoked", status=403)
            host_id = token.host_id if valid else None
            self._tokens[parsed.digest] = (time.monotonic() + TOKEN_TTL_S, host_id)
        if host_id is None:
            raise BadRequest("unknown agent token", status=401)
        return host_id

    async def host(self, host_id: int) -> HostState:
        state = self._hosts.get(host_id)
        if state is None:
            state = await sync_to_async(_load_host)(host_id)
            self._hosts[host_id] = state
        return state

    async def prepare(self, host_id: int, batch: Batch) -> HostState:
        """Apply the batch's inventory if new; check that it names only this host's devices."""
        state = await self.host(host_id)
        if batch.inventory is not None:
            await self._apply(state, batch)
            state = self._hosts[host_id]
        if self._unknown(state, batch) is not None:
            # Another worker process may have applied an inventory we have not seen.
            state = await sync_to_async(_load_host)(host_id)
            self._hosts[host_id] = state
            missing = self._unknown(state, batch)
            if missing is not None:
                raise BadRequest(
                    f"unknown to this server for host {state.hostname}: send the inventory "
                    "(\"host\") with this batch", join(batch.path, missing), status=409)
        return state

    async def _apply(self, state: HostState, batch: Batch) -> None:
        inventory = batch.inventory or {}
        if inventory["hostname"] != state.hostname:
            raise BadRequest(
                f"this token writes host {state.hostname!r}, not {inventory['hostname']!r}",
                join(batch.path, "host.hostname"), status=403)
        if digest(inventory) == state.inventory_digest:
            return
        try:
            await sync_to_async(apply_inventory)(
                state.host_id, inventory, batch.agent_version)
        except GpuOwnedElsewhere as exc:
            raise BadRequest(str(exc), join(batch.path, f"host.gpus[{exc.index}].uuid"),
                             status=403) from None
        fresh = await sync_to_async(_load_host)(state.host_id)
        fresh.last_seen_written = state.last_seen_written
        self._hosts[state.host_id] = fresh

    @staticmethod
    def _unknown(state: HostState, batch: Batch) -> str | None:
        """The field path of the first GPU or engine this host does not have, if any."""
        for i, sample in enumerate(batch.samples):
            for j, gpu in enumerate(sample.get("gpus") or ()):
                if gpu["uuid"] not in state.gpu_ids:
                    return f"samples[{i}].gpus[{j}].uuid"
            for j, engine in enumerate(sample.get("engines") or ()):
                if engine["name"] not in state.engine_ids:
                    return f"samples[{i}].engines[{j}].name"
        return None
