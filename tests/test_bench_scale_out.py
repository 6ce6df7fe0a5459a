"""The scale-out benchmark's agents are the alert fleet's own hosts: a token of each host, an
inventory that changes none of its rows, samples that name only its devices (the benchmark
itself runs with `make bench-scale-out`)."""

from __future__ import annotations

import orjson
import pytest

from controlplane.fleet.inventory import apply_inventory
from controlplane.fleet.models import AgentToken, Engine, Gpu, Host
from controlplane.lib import tokens
from controlplane.telemetry.ingest.inventory_schema import check_inventory
from tests.bench import alerts_eval, scale_out

HOSTS = 3


def fleet_rows() -> tuple[list, list, list]:
    """What the alert evaluator reads of the fleet."""
    return (list(Host.objects.order_by("id").values_list("id", "hostname", "cpu_count")),
            list(Gpu.objects.order_by("id").values_list(
                "id", "host_id", "uuid", "index", "name", "mem_total_bytes", "numa_node",
                "present")),
            list(Engine.objects.order_by("id").values_list(
                "id", "host_id", "name", "model", "gpu_uuids", "config", "present")))


@pytest.mark.django_db
def test_each_agent_holds_a_token_of_its_own_host():
    alerts_eval.create_fleet(HOSTS)
    agents = scale_out.fleet_agents(HOSTS)
    assert sorted(a.hostname for a in agents) == sorted(
        Host.objects.values_list("hostname", flat=True))
    for agent in agents:
        parsed = tokens.parse(agent.token)
        token = AgentToken.objects.get(lookup=parsed.lookup)
        assert tokens.matches(token.digest, parsed)
        assert token.host.hostname == agent.hostname


@pytest.mark.django_db
def test_a_rerun_replaces_the_hosts_tokens():
    alerts_eval.create_fleet(HOSTS)
    scale_out.fleet_agents(HOSTS)
    agents = scale_out.fleet_agents(HOSTS)
    assert AgentToken.objects.count() == HOSTS
    assert {t.host.hostname for t in AgentToken.objects.select_related("host")} == {
        a.hostname for a in agents}


@pytest.mark.django_db
def test_applying_the_agents_inventories_adds_or_changes_none_of_the_fleets_rows():
    alerts_eval.create_fleet(HOSTS)
    before = fleet_rows()
    for agent in scale_out.fleet_agents(HOSTS):
        check_inventory(agent.host, "host")  # as ingest checks it, or a 400
        apply_inventory(Host.objects.get(hostname=agent.hostname).id, agent.host)
    assert fleet_rows() == before


@pytest.mark.django_db
def test_the_agents_samples_name_only_their_hosts_devices():
    alerts_eval.create_fleet(HOSTS)
    for agent in scale_out.fleet_agents(HOSTS):
        body = orjson.loads(agent.multi_sample_body(5))
        host = Host.objects.get(hostname=agent.hostname)
        assert set(body["gpus"]["uuid"]) == set(host.gpus.values_list("uuid", flat=True))
        assert set(body["engines"]["name"]) <= set(host.engines.values_list("name", flat=True))


def test_postgres_processes_are_counted_for_the_component_whose_session_they_serve():
    groups = {scale_out.INGEST_APP: "postgres: ingest", "pitwall-bench-shard-1": "shard 1"}
    db = "bench"
    assert scale_out.postgres_group((db, scale_out.INGEST_APP, "client backend"), db,
                                    groups) == "postgres: ingest"
    assert scale_out.postgres_group((db, "pitwall-bench-shard-1", "parallel worker"), db,
                                    groups) == "shard 1"
    assert scale_out.postgres_group((db, "", "autovacuum worker"), db,
                                    groups) == "postgres: autovacuum"
    assert scale_out.postgres_group(("other", scale_out.INGEST_APP, "client backend"), db,
                                    groups) is None
    assert "WAL" in scale_out.postgres_group((None, "", "walwriter"), db, groups)


def test_the_brin_stand_in_summarises_the_full_ranges_once_and_leaves_the_filling_one():
    ranges = ["idx", "part", 128, 256]  # the bench's own rows end in the range before 256
    assert scale_out.summarise_sql(ranges, 300) is None  # 256-383 is still filling
    sql, params = scale_out.summarise_sql(ranges, 700)
    assert (params["first"], params["stop"]) == (256, 640) and ranges[3] == 640
    assert "brin_summarize_range" in sql
    assert scale_out.summarise_sql(ranges, 700) is None
