"""Batches posted to the real ingest app reach the sockets that watch them, as typed events."""

from __future__ import annotations

import pytest

from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.telemetry.series.histograms import histogram_quantile
from tests.realtime.helpers import (
    body,
    open_socket,
    post,
    refresh_interest,
    subscribe,
    synchronously,
)
from tests.support.polling import await_until


@pytest.fixture
def reported_hosts(live_ingest, agents) -> dict:
    """Both hosts have reported once (inventory: GPUs and engines exist); nobody watched."""
    for hostname, token in agents.items():
        code, reply = live_ingest.post(body(hostname), token)
        assert code == 200, reply
    return {name: {"host": Host.objects.get(hostname=name).id,
                   "engine": Engine.objects.get(host__hostname=name).id,
                   "gpus": [Gpu.objects.get(uuid=f"GPU-{name}-{i}").id for i in range(2)]}
            for name in agents}


def test_a_batch_reaches_a_subscribed_socket_as_host_engine_and_fleet_events(
        live_ingest, agents, reported_hosts, session_handshake):
    node = reported_hosts["gpu-node-1"]
    sent = body("gpu-node-1")

    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        await subscribe(socket, "fleet", f"host:{node['host']}", f"engine:{node['engine']}")
        await refresh_interest(live_ingest)
        assert (await post(live_ingest, sent, agents["gpu-node-1"]))[0] == 200
        events = [await socket.receive_json() for _ in range(3)]
        await socket.close()
        return {event["type"]: event for event in events}

    events = scenario()
    ts = sent["samples"][0]["ts"]
    gpu0, gpu1 = node["gpus"]
    assert events["host"] == {"type": "host", "host": node["host"], "samples": [{
        "ts": ts,
        "host": {"cpu_pct": 12.5, "cpu_core_pct": [10.0, 15.0], "load1": 0.7,
                 "mem_used_bytes": 2**33, "mem_total_bytes": 64 * 2**30},
        "gpus": {str(gpu0): {"util_pct": 90.0, "mem_used_bytes": 2**36,
                             "mem_total_bytes": 80 * 2**30, "temp_c": 60},
                 str(gpu1): {"util_pct": 91.0, "mem_used_bytes": 2**36,
                             "mem_total_bytes": 80 * 2**30, "temp_c": 60}},
        "procs": [{"pid": 4242, "engine": node["engine"], "cpu_pct": 99.0, "rss_bytes": 2**30,
                   "threads": 60, "cpu_affinity": [0, 1], "numa_nodes": [0]}]}]}
    bounds, counts = [0.1, 0.5, 1.0], [3, 2, 1, 0]
    assert events["engine"] == {"type": "engine", "engine": node["engine"], "samples": [{
        "ts": ts, "values": {"up": 1, "requests_running": 4, "kv_cache_usage": 0.25},
        "quantiles": {"ttft_seconds": {
            label: histogram_quantile(q, bounds, counts)
            for label, q in (("0.5", 0.5), ("0.9", 0.9), ("0.99", 0.99))}}}]}
    fleet_event = events["fleet"]
    assert fleet_event["hosts"] == [{
        "id": node["host"], "ts": ts, "cpu_pct": 12.5, "mem_used_bytes": 2**33,
        "mem_total_bytes": 64 * 2**30,
        "gpus": [{"id": gpu, "mem_used_bytes": 2**36, "mem_total_bytes": 80 * 2**30,
                  "util_pct": util} for gpu, util in ((gpu0, 90.0), (gpu1, 91.0))],
        "engines": [{"id": node["engine"], "up": 1, "requests_running": 4,
                     "kv_cache_usage": 0.25}]}]  # generation_tokens_per_s: absent in the batch
    assert fleet_event["sent"] >= ts


def test_a_new_subscription_is_seen_without_waiting_for_the_next_interest_read(
        live_ingest, agents, reported_hosts, session_handshake):
    # the publisher re-reads interest only hourly in these tests
    node = reported_hosts["gpu-node-1"]
    publisher = live_ingest.app.listeners[0]  # the live publisher (asgi.ingest_app)

    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        await subscribe(socket, f"engine:{node['engine']}")
        await await_until(lambda: publisher.watches(f"engine.{node['engine']}"),
                    "the publisher never noticed the subscription")
        await post(live_ingest, body("gpu-node-1"), agents["gpu-node-1"])
        event = await socket.receive_json()
        await socket.close()
        return event

    assert (scenario()["type"], publisher.watches(f"host.{node['host']}")) == ("engine", False)


def test_a_socket_watching_one_host_gets_nothing_of_another(
        live_ingest, agents, reported_hosts, session_handshake):
    one, two = reported_hosts["gpu-node-1"]["host"], reported_hosts["gpu-node-2"]["host"]

    @synchronously
    async def scenario():
        watches_one = await open_socket(session_handshake)
        watches_two = await open_socket(session_handshake)
        await subscribe(watches_one, f"host:{one}")
        await subscribe(watches_two, f"host:{two}")
        await refresh_interest(live_ingest)
        await post(live_ingest, body("gpu-node-2"), agents["gpu-node-2"])
        of_two = await watches_two.receive_json()  # host 2's event was published...
        await post(live_ingest, body("gpu-node-1"), agents["gpu-node-1"])
        first_of_one = await watches_one.receive_json()  # ...and was not this socket's first
        for socket in (watches_one, watches_two):
            await socket.close()
        return of_two, first_of_one

    of_two, first_of_one = scenario()
    assert (of_two["type"], of_two["host"]) == ("host", two)
    assert (first_of_one["type"], first_of_one["host"]) == ("host", one)


def test_the_fleet_summary_goes_out_at_most_once_per_interval(
        live_settings, make_ingest, agents, session_handshake):
    live_settings.PITWALL = {**live_settings.PITWALL, "LIVE_FLEET_INTERVAL_MS": 3_600_000}
    ingest = make_ingest()
    for hostname, token in agents.items():
        ingest.post(body(hostname), token)
    one, two = (Host.objects.get(hostname=n).id for n in agents)
    burst = ["gpu-node-1"] * 5 + ["gpu-node-2"]

    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        await subscribe(socket, "fleet", f"host:{one}", f"host:{two}")
        await refresh_interest(ingest)
        seen = []
        for i, hostname in enumerate(burst):
            await post(ingest, body(hostname), agents[hostname])
            # The first batch brings its host event and the (first) fleet summary; each later
            # one its host event only: a second summary would arrive in place of one of them.
            for _ in range(2 if i == 0 else 1):
                seen.append((await socket.receive_json())["type"])
        await socket.close()
        return seen

    assert scenario() == ["host", "fleet", "host", "host", "host", "host", "host"]


def test_a_fleet_summary_carries_only_the_hosts_that_reported_since_the_last_one(
        live_ingest, agents, reported_hosts, session_handshake):
    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        await subscribe(socket, "fleet")
        await refresh_interest(live_ingest)
        summaries = []
        for hostname in ("gpu-node-1", "gpu-node-2", "gpu-node-2"):
            await post(live_ingest, body(hostname), agents[hostname])
            summaries.append(await socket.receive_json())
        await socket.close()
        return summaries

    summaries = scenario()
    one, two = reported_hosts["gpu-node-1"]["host"], reported_hosts["gpu-node-2"]["host"]
    assert [[h["id"] for h in s["hosts"]] for s in summaries] == [[one], [two], [two]]
