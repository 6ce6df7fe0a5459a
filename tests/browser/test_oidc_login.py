"""Single sign-on in a real browser against a real OpenID Connect provider: npm's certified
``oidc-provider`` in a Node process of its own (tests/support/oidc.py), the server a uvicorn
process configured for it, with passwords turned off for all but the break-glass ``admin``.

The provider's group claim gives the role at every sign-in: an admin who is taken out of the
admins' group at the provider is an operator at their next sign-in, and no one after leaving
every mapped group.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model

from controlplane.accounts.roles import role_of
from controlplane.accounts.sso.models import Identity
from tests.browser.helpers import PASSWORD, Stack, shot
from tests.support.live import RedisServer, free_port, server_env, start_server
from tests.support.oidc import OidcProvider
from tests.support.roles import user_with_role

pytestmark = pytest.mark.slow(seconds=15)

IDP_PASSWORD = "idp-password-of-alice"


@pytest.fixture(scope="module")
def provider(tmp_path_factory) -> Iterator[OidcProvider]:
    port = free_port()
    workdir = tmp_path_factory.mktemp("oidc")
    idp = OidcProvider(workdir, f"http://127.0.0.1:{port}/oidc/callback/")
    yield idp.start()
    idp.stop()


@pytest.fixture(scope="module")
def module_stack(django_db_setup, tmp_path_factory, provider) -> Iterator[Stack]:
    """The browser modules' stack, for a server that signs in through ``provider``."""
    workdir = tmp_path_factory.mktemp("oidc-server")
    redis_server = RedisServer(workdir)
    redis_server.start()
    env = {**server_env(), **provider.server_env(), "REDIS_URL": redis_server.url,
           "PITWALL_OIDC_GROUP_ROLES": "pitwall-admins=admin,pitwall-ops=operator",
           "PITWALL_LOCAL_LOGIN": "off", "PITWALL_BREAK_GLASS_USERS": "admin"}
    port = urlsplit(provider.redirect_uri).port  # the client's redirect URI names the server
    server = start_server(port, workdir / "server.log", env)
    yield Stack(f"http://127.0.0.1:{port}", server, redis_server)
    server.stop()
    redis_server.stop()


@pytest.fixture
def tab(chromium, browser_stack):
    context = chromium.new_context(viewport={"width": 1200, "height": 800})
    yield context.new_page()
    context.close()


def sign_in_at_provider(tab, base: str, provider: OidcProvider, login: str, password: str):
    """From Pitwall's sign-in page, through the provider's button and its form."""
    tab.goto(f"{base}/accounts/login/")
    tab.click("#sso-sign-in")
    tab.wait_for_selector("input[name=login]")
    assert tab.url.startswith(f"{provider.issuer}/interaction/")
    tab.fill("input[name=login]", login)
    tab.fill("input[name=password]", password)
    tab.click("[type=submit]")


def nav_links(tab) -> list[str]:
    return tab.locator("header nav a").all_inner_texts()


def test_groups_at_the_provider_give_the_role_at_each_sign_in(chromium, browser_stack,
                                                                provider):
    base = browser_stack.base
    provider.set_user("alice", IDP_PASSWORD, ["staff", "pitwall-admins", "pitwall-ops"])
    context = chromium.new_context()
    tab = context.new_page()
    sign_in_at_provider(tab, base, provider, "alice", IDP_PASSWORD)
    tab.wait_for_url(f"{base}/")  # the fleet page, signed in
    alice = get_user_model().objects.get(username="alice")
    assert role_of(alice) == "admin"
    assert Identity.objects.get(user=alice).issuer == provider.issuer
    assert "Users" in nav_links(tab)  # an admin's page
    assert not alice.has_usable_password()
    shot(tab, "oidc-admin-signed-in")
    context.close()

    # Taken out of the admins' group at the provider: an operator at the next sign-in.
    provider.set_user("alice", IDP_PASSWORD, ["staff", "pitwall-ops"])
    context = chromium.new_context()
    tab = context.new_page()
    sign_in_at_provider(tab, base, provider, "alice", IDP_PASSWORD)
    tab.wait_for_url(f"{base}/")
    assert role_of(alice) == "operator"
    assert "Users" not in nav_links(tab)
    assert tab.goto(f"{base}/account/users/").status == 403
    context.close()

    # In no mapped group: still the same account, with no role.
    provider.set_user("alice", IDP_PASSWORD, ["staff"])
    context = chromium.new_context()
    tab = context.new_page()
    sign_in_at_provider(tab, base, provider, "alice", IDP_PASSWORD)
    tab.wait_for_url(f"{base}/")
    assert role_of(alice) is None
    assert get_user_model().objects.filter(username="alice").count() == 1
    context.close()


def test_passwords_are_refused_but_the_break_glass_admins(tab, browser_stack):
    base = browser_stack.base
    tab.goto(f"{base}/accounts/login/")
    assert tab.inner_text("#sso-sign-in") == "Sign in with Test IdP"
    tab.click("#break-glass summary")
    tab.fill("input[name=username]", browser_stack.username)  # an operator with a password
    tab.fill("input[name=password]", PASSWORD)
    tab.click("#break-glass [type=submit]")
    tab.wait_for_selector(".errorlist")
    assert ("Password sign-in is turned off for this account: sign in with Test IdP."
            in tab.inner_text(".errorlist"))
    assert tab.url == f"{base}/accounts/login/"
    shot(tab, "oidc-password-refused")

    user_with_role("admin", "admin", password=PASSWORD, is_superuser=True, is_staff=True)
    tab.fill("input[name=username]", "admin")
    tab.fill("input[name=password]", PASSWORD)
    tab.click("#break-glass [type=submit]")
    tab.wait_for_url(f"{base}/")


def test_a_provider_account_named_like_a_local_one_is_turned_back(tab, browser_stack,
                                                                   provider):
    base = browser_stack.base
    provider.set_user(browser_stack.username, IDP_PASSWORD, ["pitwall-admins"])
    sign_in_at_provider(tab, base, provider, browser_stack.username, IDP_PASSWORD)
    tab.wait_for_selector("#sign-in-message")
    assert tab.url.startswith(f"{base}/accounts/login/")
    assert (f"Sign-in with Test IdP failed: the account name '{browser_stack.username}' is "
            "already taken" in tab.inner_text("#sign-in-message"))
    local = get_user_model().objects.get(username=browser_stack.username)
    assert role_of(local) == "operator" and not Identity.objects.exists()
