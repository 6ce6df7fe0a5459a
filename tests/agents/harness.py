"""A shipper driven step by step against the fake ingest server (tests/agents/fake_ingest.py)."""

from __future__ import annotations

from agents.spool import Spool
from agents.transport import IngestClient, Shipper

TOKEN = "pw_agent_s3cret-token"


class Harness:
    """A shipper whose backoff sleeps are recorded instead of slept."""

    def __init__(self, url: str, spool_dir, jitter: float = 1.0, **spool_kw) -> None:
        self.sleeps: list[float] = []
        self.warnings: list[str] = []
        self.inventory_requests = 0
        self.spool = Spool(spool_dir, spool_kw.pop("max_bytes", 10**9), warn=self.warnings.append)
        self.shipper = Shipper(
            IngestClient(url, TOKEN, timeout=5.0), self.spool,
            inventory=lambda: {"hostname": "gpu-node-1", "gpus": []},
            on_inventory_needed=self._inventory_needed, warn=self.warnings.append,
            sleep=self.sleeps.append, rand=lambda: jitter)

    def _inventory_needed(self) -> None:
        self.inventory_requests += 1

    def drain(self, limit: int = 50) -> None:
        for _ in range(limit):
            if not self.shipper.step():
                return
        raise AssertionError("the shipper never ran out of work")
