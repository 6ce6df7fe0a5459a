"""Batch framing: the agent header (boot_id, seq) and when the inventory travels.

``(boot_id, seq)`` makes a batch idempotent on the server, so a batch keeps both for life, even
when it is replayed from the spool after a restart. The inventory (``host``) rides on the first
batch of a boot, on any batch after it changed, and on the next batch after the server said it
needs it (409).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from agents import __version__
from agents.protocol import PROTOCOL_VERSION

Batch = dict[str, Any]


def inventory_hash(inventory: dict[str, Any]) -> str:
    """A digest that does not depend on key order, so equal inventories compare equal."""
    text = json.dumps(inventory, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class BatchBuilder:
    def __init__(self, boot_id: str | None = None, version: str = __version__) -> None:
        self.boot_id = boot_id or str(uuid.uuid4())
        self.version = version
        self.seq = 0
        self.inventory: dict[str, Any] | None = None  # the latest one seen, sent or not
        self._sent_hash: str | None = None
        self._hashed: dict[str, Any] | None = None
        # Set from the sender thread on a 409; a plain bool flip, read once per batch.
        self._needed = True

    def inventory_needed(self) -> None:
        """The server lost track of this host's inventory: attach it to the next batch."""
        self._needed = True

    def build(self, samples: list[dict[str, Any]],
              inventory: dict[str, Any] | None = None) -> Batch:
        self.seq += 1
        batch: Batch = {
            "protocol": PROTOCOL_VERSION,
            "agent": {"version": self.version, "boot_id": self.boot_id, "seq": self.seq},
        }
        if inventory is not None:
            self.inventory = inventory
        # Hashing costs a JSON dump; an inventory equal to the last one hashed (dict equality
        # ignores key order too) cannot have changed, which is most intervals.
        if self.inventory is not None and (self._needed or self.inventory != self._hashed):
            digest = inventory_hash(self.inventory)
            if self._needed or digest != self._sent_hash:
                batch["host"] = self.inventory
                self._sent_hash = digest
                self._needed = False
            self._hashed = self.inventory  # its digest is _sent_hash, sent or equal to it
        batch["samples"] = samples
        return batch
