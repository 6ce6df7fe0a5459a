"""End to end: the real server asks a real agent to hold its samples, and for each sample at
once from the moment a page watches its host (interest in a real Redis of the test's own)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.db import connection

from controlplane.fleet.models import Host
from controlplane.fleet.tokens import issue_agent_token
from controlplane.realtime import interest
from tests.realtime.helpers import redis_layer
from tests.support.live import RedisServer, free_port, server_env, sim_agent, start_server
from tests.support.polling import wait_until

pytestmark = pytest.mark.slow(seconds=15)

INTERVAL_S, HOLD_S = 0.5, 2.0
HELD = round(HOLD_S / INTERVAL_S)  # samples a held batch carries


@pytest.fixture
def held_agent(empty_samples, tmp_path, settings):
    redis = RedisServer(tmp_path)
    redis.start()
    settings.REDIS_URL = redis.url  # interest is read and written in this Redis
    settings.CHANNEL_LAYERS = redis_layer(redis.url, "asgi")
    port = free_port()
    env = {**server_env(), "REDIS_URL": redis.url, "CELERY_BROKER_URL": redis.url,
           "PITWALL_AGENT_HOLD_S": str(HOLD_S)}
    server = start_server(port, tmp_path / "server.log", env)
    token_file = tmp_path / "token"
    token_file.write_text(issue_agent_token("held-host")[0])
    agent = sim_agent(port, token_file, "held-host", tmp_path / "spool", gpus=1,
                      interval=INTERVAL_S, log=tmp_path / "agent.log")
    yield agent
    agent.stop()
    server.stop()
    redis.stop()


def batches_and_samples() -> tuple[int, int]:
    """(the agent's batches stored: its stream's newest seq, the host rows stored), read in
    one statement: a batch's rows and its seq commit together."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT (SELECT coalesce(max(max_seq), 0) FROM telemetry_agentstream),"
                       " (SELECT count(*) FROM telemetry_host_sample)")
        return cursor.fetchone()


def test_an_unwatched_host_sends_held_batches_and_a_watched_one_each_sample(held_agent):
    # The first sample goes alone (no reply has asked for a hold yet), then HELD a batch.
    batches, samples = wait_until(lambda: (got := batches_and_samples())[0] >= 4 and got, 60,
                                  held_agent.output)
    assert samples == 1 + HELD * (batches - 1)

    host = Host.objects.get(hostname="held-host").id
    async_to_sync(interest.touch)({f"host.{host}"}, subscribed=True)  # a page subscribes
    at_touch = batches_and_samples()[0]
    # The ingest process sees the page within its 0.1-s poll; a held batch on its way then,
    # and the next one (whose reply asks for no hold) may still be held. From then on the
    # agent sends each sample as it takes it: five batches, five samples.
    switched = wait_until(lambda: (got := batches_and_samples())[0] >= at_touch + 3 and got,
                          60, held_agent.output)
    later = wait_until(lambda: (got := batches_and_samples())[0] >= switched[0] + 5 and got, 60,
                       held_agent.output)
    assert later[1] - switched[1] == later[0] - switched[0]
