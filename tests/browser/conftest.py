"""Browser tests: Debian's Chromium, headless, driven by Playwright, against a real server.

The server is the production ASGI app in a uvicorn process on the test database, with a
Redis channel layer. Each test module starts one server, one Redis server of its own
(``redis-server`` on a free port, nothing on disk: live events of other test sessions on this
machine cannot reach its pages, and a test can stop and restart it) and one Chromium; each
test gets empty tables (the server holds no state between tests that a flush would make
stale: it caches agent tokens, hosts and layouts by ids that are never reused), a new
operator and a new signed-in tab (`make test` runs a module's tests on one worker:
``--dist loadfile``). Screenshots go to ``test-artifacts/browser/``.

Nothing is installed from the internet here: ``make install`` installs Debian's ``chromium``
and the ``playwright`` package, whose own browser downloads are never used.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.helpers import ARTIFACTS, ONLINE_WINDOW_S, PASSWORD, Stack
from tests.support.live import RedisServer, free_port, server_env, start_server
from tests.support.roles import user_with_role

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module", autouse=True)
def _orm_beside_playwright() -> Iterator[None]:
    """Playwright's sync API keeps an event loop running in this thread while a browser is
    open (the whole module); the ORM calls the tests make between browser steps are plain
    synchronous ones. Only for these modules, never inherited."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield


@pytest.fixture(scope="module")
def module_stack(django_db_setup, tmp_path_factory) -> Iterator[Stack]:
    """One Redis and one server for the module's tests (the test database first)."""
    workdir = tmp_path_factory.mktemp("browser")
    redis_server = RedisServer(workdir)
    redis_server.start()
    port = free_port()
    # A short online window, so that a host going silent turns offline within a test.
    env = {**server_env(), "REDIS_URL": redis_server.url,
           "PITWALL_ONLINE_WINDOW_S": str(ONLINE_WINDOW_S)}
    server = start_server(port, workdir / "server.log", env)
    yield Stack(f"http://127.0.0.1:{port}", server, redis_server)
    server.stop()
    redis_server.stop()


@pytest.fixture(scope="module")
def chromium(module_stack):  # after the server: no event loop yet while it starts
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make install does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def browser_stack(module_stack, empty_samples) -> Stack:
    """The module's server on empty tables, with its Redis running (a test may have stopped
    it) and the operator the tab signs in as."""
    if not module_stack.redis.running():
        module_stack.redis.start()
    user_with_role(module_stack.username, "operator", password=PASSWORD)
    return module_stack


@pytest.fixture
def page(chromium, browser_stack, request):
    """A signed-in tab of its own; on the way out, a screenshot named after the test."""
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    tab = context.new_page()
    tab.goto(f"{browser_stack.base}/accounts/login/")
    tab.fill("input[name=username]", browser_stack.username)
    tab.fill("input[name=password]", PASSWORD)
    tab.click("[type=submit]")
    tab.wait_for_url(f"{browser_stack.base}/")
    yield tab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{request.node.name}-end.png"), full_page=True)
    context.close()
