"""A revoked or expired agent token is refused from the very next batch."""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone

from controlplane.fleet.models import AgentToken, Gpu
from controlplane.fleet.tokens import issue_agent_token, revoke_agent_tokens
from tests.telemetry.factories import batch, refused, stored_rows


def test_the_very_next_batch_after_a_revocation_is_refused(ingest, host_token):
    assert ingest.post(batch(seq=1), host_token)[0] == 200  # the token is cached now
    rows = stored_rows()
    assert revoke_agent_tokens("gpu-node-1") == 1
    reply = refused(ingest, batch(seq=2), host_token, 401)
    assert "revoked" in reply["error"]
    assert stored_rows() == rows
    refused(ingest, batch(seq=3), host_token, 401)  # and at the door from now on


def test_revoking_one_token_leaves_the_hosts_other_tokens_working(ingest, host_token):
    """Any path that sets revoked_at counts: a save (the admin, the API) or a bulk update."""
    second, _ = issue_agent_token("gpu-node-1")
    assert ingest.post(batch(seq=1), host_token)[0] == 200
    assert ingest.post(batch(seq=2), second)[0] == 200
    token = AgentToken.objects.order_by("id").first()
    token.revoked_at = timezone.now()
    token.save()
    refused(ingest, batch(seq=3), host_token, 401)
    assert ingest.post(batch(seq=4), second)[0] == 200
    AgentToken.objects.filter(revoked_at=None).update(revoked_at=timezone.now())
    refused(ingest, batch(seq=5), second, 401)


def test_a_revoked_token_cannot_change_the_inventory_either(ingest, host_token):
    assert ingest.post(batch(seq=1), host_token)[0] == 200
    revoke_agent_tokens("gpu-node-1")
    body = batch(seq=2, gpus=3)
    refused(ingest, body, host_token, 401)
    assert Gpu.objects.filter(host__hostname="gpu-node-1").count() == 2


def test_a_token_past_its_expiry_is_refused_like_a_revoked_one(ingest, host_token):
    assert ingest.post(batch(seq=1), host_token)[0] == 200
    AgentToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    reply = refused(ingest, batch(seq=2), host_token, 401)
    assert "expired" in reply["error"]
    assert stored_rows()["host"] == 1


def test_a_token_expires_while_cached(ingest, host_token):
    """Refused at the door, by the cached expiry: the database would still take it."""
    AgentToken.objects.update(expires_at=timezone.now() + timedelta(hours=1))
    assert ingest.post(batch(seq=1), host_token)[0] == 200  # the token is cached now
    ingest.app.registry.wall_clock = lambda: time.time() + 2 * 3600
    assert "expired" in refused(ingest, batch(seq=2), host_token, 401)["error"]
    assert stored_rows()["host"] == 1


def test_a_token_with_a_future_expiry_works(ingest, host_token):
    AgentToken.objects.update(expires_at=timezone.now() + timedelta(days=1))
    assert ingest.post(batch(seq=1), host_token)[0] == 200
