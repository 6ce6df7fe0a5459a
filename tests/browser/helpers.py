"""What the browser tests share besides fixtures: an agent that posts over HTTP, the stack a
test drives, screenshots and pauses."""

from __future__ import annotations

import time
import urllib.request
import uuid
from dataclasses import dataclass

import orjson

from controlplane.fleet.tokens import issue_agent_token
from tests.support.live import ROOT, Process, RedisServer
from tests.telemetry import factories

ARTIFACTS = ROOT / "test-artifacts" / "browser"
PASSWORD = "browser-test-password"
ONLINE_WINDOW_S = 5  # the server's online window: a host going silent turns offline in a test


@dataclass
class Agent:
    """Posts protocol-v1 batches for one host over HTTP, as the agent does."""

    base: str
    token: str
    hostname: str
    gpus: int = 2
    seq: int = 0
    boot_id: str = ""

    def __post_init__(self) -> None:
        self.boot_id = str(uuid.uuid4())

    def send(self, util_pct: float = 50.0, ts: float | None = None,
             kv_cache_usage: float = 0.25) -> dict:
        self.seq += 1
        sample = factories.sample(ts=ts, hostname=self.hostname, gpus=self.gpus)
        for gpu in sample["gpus"]:
            gpu["util_pct"] = util_pct
        sample["engines"][0]["kv_cache_usage"] = kv_cache_usage
        body = factories.batch(seq=self.seq, boot_id=self.boot_id, samples=[sample],
                               with_inventory=self.seq == 1, hostname=self.hostname,
                               gpus=self.gpus)
        request = urllib.request.Request(
            f"{self.base}/api/v1/ingest", data=orjson.dumps(body), method="POST",
            headers={"Authorization": f"Bearer {self.token}",
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            return orjson.loads(reply.read())


@dataclass
class Stack:
    """The server and Redis of a test module, and the operator the test signs in as."""

    base: str
    server: Process
    redis: RedisServer
    username: str = "operator"

    def agent(self, hostname: str, gpus: int = 2) -> Agent:
        token, _ = issue_agent_token(hostname)
        return Agent(self.base, token, hostname, gpus)


def shot(tab, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def settle(seconds: float) -> None:
    """Lets the page run (sockets, timers) between steps."""
    time.sleep(seconds)
