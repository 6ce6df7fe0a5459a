"""Browser tests: Debian's Chromium, headless, driven by Playwright, against a real server.

The server is the production ASGI app in a uvicorn process on the test database, with a
Redis channel layer. Each test gets a Redis server of its own (``redis-server`` on a free port,
nothing on disk): live events of other test sessions on this machine cannot reach its pages,
and a test can stop and restart it. Screenshots go to ``test-artifacts/browser/``.

Nothing is installed from the internet here: ``make install`` installs Debian's ``chromium``
and the ``playwright`` package, whose own browser downloads are never used.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from controlplane.fleet.tokens import issue_agent_token
from tests.live import ROOT, Process, RedisServer, free_port, server_env, start_server
from tests.support.roles import user_with_role
from tests.telemetry import factories

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
PASSWORD = "browser-test-password"
ONLINE_WINDOW_S = 5  # a throwaway user in the throwaway test database



@pytest.fixture(autouse=True)
def _orm_beside_playwright(monkeypatch):
    """Playwright's sync API keeps an event loop in this thread; the ORM calls the tests make
    between browser steps are plain synchronous ones. Only for these tests, never inherited."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


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
    base: str
    server: Process
    redis: RedisServer
    username: str = "operator"

    def agent(self, hostname: str, gpus: int = 2) -> Agent:
        token, _ = issue_agent_token(hostname)
        return Agent(self.base, token, hostname, gpus)


@pytest.fixture
def chromium(django_db_setup):  # the test database first: no event loop yet
    """A browser per test: Playwright's sync API keeps an event loop running in this thread
    while it is started, which would make every later test's ORM call refuse to run."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make install does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def stack(empty_samples, tmp_path, django_user_model):
    user_with_role("operator", "operator", password=PASSWORD)
    redis_server = RedisServer(tmp_path)
    redis_server.start()
    port = free_port()
    # A short online window, so that a host going silent turns offline within a test.
    env = {**server_env(), "REDIS_URL": redis_server.url,
           "PITWALL_ONLINE_WINDOW_S": str(ONLINE_WINDOW_S)}
    server = start_server(port, tmp_path / "server.log", env)
    base = f"http://127.0.0.1:{port}"
    yield Stack(base, server, redis_server)
    server.stop()
    redis_server.stop()


@pytest.fixture
def page(chromium, stack, request):
    """A logged-in tab; on the way out, a screenshot named after the test."""
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    tab = context.new_page()
    tab.goto(f"{stack.base}/accounts/login/")
    tab.fill("input[name=username]", stack.username)
    tab.fill("input[name=password]", PASSWORD)
    tab.click("[type=submit]")
    tab.wait_for_url(f"{stack.base}/")
    yield tab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{request.node.name}-end.png"), full_page=True)
    context.close()


def shot(tab, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def settle(seconds: float) -> None:
    """Lets the page run (sockets, timers) between steps."""
    time.sleep(seconds)
