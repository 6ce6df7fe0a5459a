"""Single sign-on, below the browser: the group claim's mapping to roles, the Pitwall user a
provider's claims sign in as, and the switch that turns passwords off for all but the
break-glass accounts. The whole sign-in against a real provider: tests/browser/test_oidc_login.py.
"""

from __future__ import annotations

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import authenticate, get_user_model
from django.test import Client, RequestFactory

from controlplane.accounts.roles import role_of
from controlplane.accounts.sso.backends import _check_id_token
from controlplane.accounts.sso.identities import Refused, user_for_claims
from controlplane.accounts.sso.mapping import (
    groups_from_claim,
    parse_group_roles,
    role_for_groups,
)
from controlplane.accounts.sso.models import Identity
from controlplane.lib.env import ConfigError
from tests.support.roles import user_with_role
from tests.test_settings import run_manage

ISSUER = "https://idp.example.test"
PASSWORD = "correct horse battery staple"
MAPPING = {"pitwall-admins": "admin", "pitwall-deploy": "deployer", "pitwall-ops": "operator",
           "everyone": "viewer"}


def sso_settings(**changes) -> dict:
    return {"ENABLED": True, "LOCAL_LOGIN": True, "BREAK_GLASS_USERS": [], "ISSUER": ISSUER,
            "PROVIDER_NAME": "Corp IdP", "USERNAME_CLAIM": "preferred_username",
            "GROUPS_CLAIM": "groups", "GROUP_ROLES": MAPPING, **changes}


@pytest.fixture
def sso(db, settings):
    settings.PITWALL_SSO = sso_settings()
    return settings


# The mapping setting.

def test_the_mapping_setting_reads_group_equals_role():
    assert parse_group_roles(" pitwall-admins=admin, cn=ops=operator ,") == {
        "pitwall-admins": "admin", "cn=ops": "operator"}
    assert parse_group_roles("") == {}


@pytest.mark.parametrize("text,message", [
    ("pitwall-admins", "'pitwall-admins' is not group=role"),
    ("=admin", "'=admin' is not group=role"),
    ("ops=root", "'ops=root' names no role"),
    ("ops=admin,ops=viewer", "group 'ops' is mapped to two roles"),
])
def test_a_bad_mapping_stops_the_process_naming_the_item(text, message):
    with pytest.raises(ConfigError, match=f"PITWALL_OIDC_GROUP_ROLES: {message}"):
        parse_group_roles(text)


def test_the_highest_mapped_role_wins_and_unmapped_groups_give_nothing():
    assert role_for_groups(["everyone", "pitwall-ops", "pitwall-admins"], MAPPING) == "admin"
    assert role_for_groups(["pitwall-ops", "everyone"], MAPPING) == "operator"
    assert role_for_groups(["staff", "Pitwall-Admins"], MAPPING) is None  # exact names only
    assert role_for_groups([], MAPPING) is None


@pytest.mark.parametrize("claim,groups", [
    (["a", "b"], ["a", "b"]), ("a", ["a"]), (None, []), ({"a": 1}, []), (["a", 1, None], ["a"]),
])
def test_the_group_claim_is_a_list_of_names_or_one_name(claim, groups):
    assert groups_from_claim(claim) == groups


def test_local_login_off_without_single_sign_on_stops_the_process():
    done = run_manage("check", SECRET_KEY="k" * 50, PITWALL_LOCAL_LOGIN="off")
    assert done.returncode == 2
    assert "PITWALL_LOCAL_LOGIN=off needs single sign-on" in done.stderr


def test_single_sign_on_without_its_endpoints_stops_the_process_naming_one():
    done = run_manage("check", SECRET_KEY="k" * 50, PITWALL_OIDC_CLIENT_ID="pitwall",
                      PITWALL_OIDC_ISSUER=ISSUER, PITWALL_OIDC_CLIENT_SECRET="s")
    assert done.returncode == 2
    assert "PITWALL_OIDC_AUTHORIZATION_URL is not set" in done.stderr


# The user the claims sign in as.

def claims(sub: str = "s-1", username: str = "alice", groups=("pitwall-admins",)) -> dict:
    return {"sub": sub, "preferred_username": username, "email": f"{username}@example.test",
            "groups": list(groups)}


def test_the_first_sign_in_creates_the_user_with_its_role_and_no_password(sso):
    user = user_for_claims(ISSUER, claims())
    assert (user.username, user.email, role_of(user)) == ("alice", "alice@example.test", "admin")
    assert not user.has_usable_password()
    assert Identity.objects.get(user=user).subject == "s-1"


def test_each_sign_in_sets_the_role_from_the_groups_it_brings(sso):
    user_for_claims(ISSUER, claims(groups=["pitwall-admins", "pitwall-ops"]))
    user = user_for_claims(ISSUER, claims(groups=["pitwall-ops"]))  # taken out of admins
    assert role_of(user) == "operator"
    user = user_for_claims(ISSUER, claims(groups=["somewhere-else"]))
    assert role_of(user) is None
    assert user.is_active  # no role is no rights, not no account
    user = user_for_claims(ISSUER, claims(groups=["pitwall-deploy"]))
    assert role_of(user) == "deployer"
    assert get_user_model().objects.count() == 1


def test_the_subject_finds_the_user_whatever_name_it_brings_later(sso):
    first = user_for_claims(ISSUER, claims(username="alice"))
    again = user_for_claims(ISSUER, claims(username="alice.renamed"))
    assert again.pk == first.pk and again.username == "alice"


def test_a_provider_account_named_like_a_local_one_never_becomes_it(sso):
    local = user_with_role("admin", "admin", password=PASSWORD, is_superuser=True)
    for name in ("admin", "ADMIN"):
        with pytest.raises(Refused, match=f"'{name}' is already taken by an account that does "
                                          "not sign in with Corp IdP"):
            user_for_claims(ISSUER, claims(sub="attacker", username=name))
    assert not Identity.objects.exists()
    assert list(get_user_model().objects.values_list("pk", flat=True)) == [local.pk]


def test_the_same_subject_at_another_issuer_is_another_person(sso):
    user_for_claims(ISSUER, claims(sub="1", username="alice"))
    with pytest.raises(Refused, match="'alice' is already taken"):
        user_for_claims("https://other.example.test", claims(sub="1", username="alice"))


@pytest.mark.parametrize("changes,message", [
    ({"sub": ""}, "no usable subject"),
    ({"sub": 7}, "no usable subject"),
    ({"preferred_username": None}, "no usable preferred_username"),
    ({"preferred_username": "a b/c"}, "cannot be a Pitwall account name"),
    ({"preferred_username": "x" * 151}, "no usable preferred_username"),
])
def test_claims_without_a_usable_subject_or_name_are_refused_and_nothing_is_stored(
        sso, changes, message):
    with pytest.raises(Refused, match=message):
        user_for_claims(ISSUER, {**claims(), **changes})
    assert not get_user_model().objects.exists()


def test_a_deactivated_user_is_refused_and_keeps_its_roles_unchanged(sso):
    user = user_for_claims(ISSUER, claims(groups=["pitwall-ops"]))
    user.is_active = False
    user.save()
    with pytest.raises(Refused, match="deactivated"):
        user_for_claims(ISSUER, claims(groups=["pitwall-admins"]))
    assert role_of(user) == "operator"


# The local-password switch.

@pytest.fixture
def local_off(settings):
    settings.PITWALL_SSO = sso_settings(LOCAL_LOGIN=False, BREAK_GLASS_USERS=["admin"])
    user_with_role("admin", "admin", password=PASSWORD, is_staff=True, is_superuser=True)
    user_with_role("ops", "admin", password=PASSWORD, is_staff=True)
    return settings


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_with_local_login_off_a_password_is_refused_with_a_message_naming_the_provider(
        db, local_off, url):
    client = Client()
    response = client.post(url, {"username": "ops", "password": PASSWORD})
    assert response.status_code == 200
    assert ("Password sign-in is turned off for this account: sign in with Corp IdP."
            in response.content.decode())
    assert "_auth_user_id" not in client.session
    # Refused before it is tried: no failed attempt counts towards a lockout.
    assert not AccessAttempt.objects.exists()


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_with_local_login_off_the_break_glass_admin_still_signs_in(db, local_off, url):
    client = Client()
    response = client.post(url, {"username": "admin", "password": PASSWORD})
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(get_user_model().objects.get(
        username="admin").pk)


def test_with_local_login_off_the_password_backend_refuses_whoever_asks_it(db, local_off):
    request = RequestFactory().post("/elsewhere/")
    assert authenticate(request, username="ops", password=PASSWORD) is None
    assert authenticate(request, username="admin", password=PASSWORD) is not None


def test_with_local_login_on_passwords_work_as_before(db, sso):
    user_with_role("ops", "viewer", password=PASSWORD)
    client = Client()
    assert client.post("/accounts/login/", {"username": "ops", "password": PASSWORD}
                       ).status_code == 302


def test_the_sign_in_page_shows_the_providers_button_when_configured(db, sso):
    page = Client().get("/accounts/login/?next=/alerts/").content.decode()
    assert ('href="/oidc/authenticate/?next=/alerts/">Sign in with Corp IdP</a>' in page)
    assert 'name="password"' in page


def test_without_single_sign_on_there_is_no_button_and_its_routes_are_404(db, settings):
    settings.PITWALL_SSO = sso_settings(ENABLED=False)
    client = Client()
    assert "Sign in with" not in client.get("/accounts/login/").content.decode()
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404


def test_refused_single_sign_ons_never_lock_an_address_out(db, sso):
    """Counted as password failures of no user, five refused callbacks locked everyone behind
    their address out of single sign-on for PITWALL_LOGIN_COOLOFF_MINUTES."""
    for _ in range(3 * sso.AXES_FAILURE_LIMIT):
        request = RequestFactory().get("/oidc/callback/?code=c&state=s")
        assert authenticate(request, nonce="n", code_verifier="v") is None
        assert not getattr(request, "axes_locked_out", False)
    assert not AccessAttempt.objects.exists()


# What the library leaves unchecked in the ID token.

GOOD_TOKEN = {"iss": ISSUER, "aud": "pitwall", "sub": "s-1", "exp": 2_000_000_000}


@pytest.mark.parametrize("changes,message", [
    ({"iss": "https://evil.example.test"}, "the ID token is from 'https://evil.example.test'"),
    ({"aud": "another-app"}, "not meant for Pitwall"),
    ({"aud": ["another-app", "pitwall"]}, "not meant for Pitwall"),  # several: azp must say us
    ({"exp": None}, "no expiry"),
])
def test_an_id_token_from_another_issuer_or_for_another_client_is_refused(changes, message):
    token = {key: value for key, value in {**GOOD_TOKEN, **changes}.items() if value is not None}
    with pytest.raises(Refused, match=message):
        _check_id_token(token, ISSUER, "pitwall")
    _check_id_token(GOOD_TOKEN, ISSUER, "pitwall")
    _check_id_token({**GOOD_TOKEN, "aud": ["other", "pitwall"], "azp": "pitwall"}, ISSUER,
                    "pitwall")
