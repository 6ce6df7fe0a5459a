"""Ingest's reply tells the agent which desired config its host is at (docs/protocol.md)."""

from __future__ import annotations

from controlplane.fleet import deployments
from controlplane.fleet.models import Deployment, Host
from controlplane.telemetry.ingest import registry
from tests.telemetry.factories import batch


def test_the_reply_carries_the_hosts_config_version_once_a_deployment_changes(
        ingest, host_token, monkeypatch):
    monkeypatch.setattr(registry, "CONFIG_TTL_S", 0.0)  # read the version on every request
    code, reply = ingest.post(batch(seq=1), host_token)
    assert (code, reply["config_version"]) == (200, 0)
    host = Host.objects.get(hostname="gpu-node-1")
    deployments.save(Deployment(host=host, name="llama", model="meta-llama/Llama-3.1-8B",
                                port=8000, gpu_indices=[0], vllm_version="0.33.0",
                                args={"max_num_seqs": 64}))
    code, reply = ingest.post(batch(seq=2, with_inventory=False), host_token)
    assert (code, reply["config_version"]) == (200, 1)


def test_another_hosts_change_leaves_this_hosts_version_alone(ingest, host_token, monkeypatch):
    monkeypatch.setattr(registry, "CONFIG_TTL_S", 0.0)
    ingest.post(batch(seq=1), host_token)
    Host.objects.create(hostname="elsewhere", config_version=5)
    code, reply = ingest.post(batch(seq=2, with_inventory=False), host_token)
    assert (code, reply["config_version"]) == (200, 0)


def test_a_due_reload_runs_behind_the_request_which_gets_the_cached_version(ingest,
                                                                          host_token):
    ingest.post(batch(seq=1), host_token)
    host = Host.objects.get(hostname="gpu-node-1")
    reg = ingest.app.registry
    Host.objects.filter(pk=host.pk).update(config_version=4)
    reg._versions_loaded -= registry.CONFIG_TTL_S  # due, not yet stale

    async def twice() -> tuple[int, int]:
        first = await reg.config_version(host.pk)  # answered from the cache at once
        await reg._versions_task
        return first, await reg.config_version(host.pk)

    assert ingest.run(twice()) == (0, 4)


def test_a_due_token_reload_runs_behind_the_request(ingest, host_token):
    ingest.post(batch(seq=1), host_token)
    reg = ingest.app.registry
    reg._tokens_loaded -= registry.TOKEN_TTL_S  # due, not yet stale
    due_since = reg._tokens_loaded

    async def authenticate() -> tuple[int, float]:
        credential = await reg.authenticate(f"Bearer {host_token}".encode())
        waited = reg._tokens_loaded  # the reload has not run yet: the request did not wait
        await reg._tokens_task
        return credential.host_id, waited

    host_id, waited = ingest.run(authenticate())
    assert host_id == Host.objects.get(hostname="gpu-node-1").pk
    assert waited == due_since < reg._tokens_loaded
