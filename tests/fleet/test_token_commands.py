"""The token commands: print once, store only a hash, revoke."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from controlplane.fleet.models import AgentToken, ApiToken, Host
from controlplane.lib import tokens


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_agent_token_prints_a_token_once_and_stores_only_its_hash(db):
    printed = run("create_agent_token", "gpu-node-7", "--quiet").strip()
    stored = AgentToken.objects.get(host__hostname="gpu-node-7")
    assert printed.startswith("pwa_") and printed not in (stored.digest, stored.lookup)
    assert stored.digest == tokens.digest_of(printed)
    assert Host.objects.filter(hostname="gpu-node-7").exists()


def test_create_api_token_acts_as_an_existing_user_only(db):
    get_user_model().objects.create_user("ops")
    printed = run("create_api_token", "ops", "--quiet").strip()
    assert printed.startswith("pwu_")
    assert ApiToken.objects.get(user__username="ops").digest == tokens.digest_of(printed)
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        run("create_api_token", "nobody")


def test_create_api_token_read_only_makes_a_token_that_only_reads(db):
    get_user_model().objects.create_user("prometheus")
    run("create_api_token", "prometheus", "--read-only", "--quiet")
    run("create_api_token", "prometheus", "--quiet")
    assert sorted(ApiToken.objects.values_list("scope", flat=True)) == ["read", "write"]


def test_revoke_agent_tokens_marks_every_token_of_the_host(db):
    run("create_agent_token", "gpu-node-8")
    run("create_agent_token", "gpu-node-8")
    assert "Revoked 2 agent token(s)" in run("revoke_agent_tokens", "gpu-node-8")
    assert not AgentToken.objects.filter(revoked_at__isnull=True).exists()
    with pytest.raises(CommandError, match="no host named"):
        run("revoke_agent_tokens", "ghost")
