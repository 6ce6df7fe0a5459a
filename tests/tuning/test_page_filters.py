"""The Tuning page for a fleet: the open suggestions by default, filters by state, kind, host,
engine or deployment name and who runs the server, that combine; a page of 25 at a time whose
links keep the filters; a bad filter is a 400 that names it; the page's queries do not grow with
it. The API takes the host and watched filters too."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest
from django.test import Client

from controlplane.fleet.models import Engine, Host
from controlplane.fleet.tokens import issue_api_token
from controlplane.tuning.models import Suggestion
from controlplane.web.views.suggestions import PAGE_SIZE
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role
from tests.tuning.factories import deployment, gpus, host

pytestmark = pytest.mark.django_db

URL = "/suggestions/"
EVIDENCE = {"metric": "engine.kv_cache_usage", "stat": "avg", "value": 0.97,
            "threshold": ">= 0.9", "entity": "engine", "start": "2026-12-03T11:50:00+00:00",
            "end": "2026-12-03T12:00:00+00:00"}
CHANGE = [{"field": "args.max_num_seqs", "current": 128, "proposed": 96}]


def suggest(kind: str = "kv_pressure", confidence: float = 0.8, state: str = "open",
            changes: list | None = None, **server) -> Suggestion:
    engine = server.get("engine")
    return Suggestion.objects.create(
        kind=kind, state=state, confidence=confidence, severity=1.0,
        changes=CHANGE if changes is None else changes, reasoning="KV cache averaged 97 %.",
        expected="Fewer preemptions.", **server,
        evidence=[{**EVIDENCE, "entity_id": engine.id if engine else None}])


@dataclass
class Fleet:
    """Two hosts; on the first a deployment (llama-8b, engine vllm:8000/0) and an engine
    Pitwall only watches (vllm:9000/0); on the second a watched vllm:8000/0."""

    first: Host
    second: Host
    applicable: Suggestion  # the deployment's, open, confidence 0.6
    report: Suggestion  # the deployment's, open, nothing to apply, confidence 1.0
    watched: Suggestion  # first host's watched engine, open, 0.9
    elsewhere: Suggestion  # second host's watched engine, open, 0.7
    dismissed: Suggestion  # the deployment's, dismissed
    cleared: Suggestion  # second host's watched engine, cleared


@pytest.fixture
def fleet() -> Fleet:
    first = host()
    gpus(first)
    d = deployment(first)
    own = Engine.objects.create(host=first, name="vllm:8000/0")
    watched = Engine.objects.create(host=first, name="vllm:9000/0")
    second = Host.objects.create(hostname="h100-node-2")
    other = Engine.objects.create(host=second, name="vllm:8000/0")
    mine = {"deployment": d, "engine": own, "revision": d.revision}
    return Fleet(
        first, second,
        applicable=suggest(confidence=0.6, **mine),
        report=suggest("host_readiness", confidence=1.0, changes=[], **mine),
        watched=suggest("prefill_ttft", confidence=0.9, engine=watched),
        elsewhere=suggest(confidence=0.7, engine=other),
        dismissed=suggest(state="dismissed", **mine),
        cleared=suggest("cpu_starvation", state="cleared", engine=other))


def signed_in(role: str) -> Client:
    client = Client()
    client.force_login(user_with_role(f"user-{role}", role))
    return client


def shown(html: str) -> list[int]:
    """The suggestions on the page, in its order."""
    return [int(i) for i in re.findall(r'<article[^>]*id="suggestion-(\d+)"', html)]


def ids(*suggestions: Suggestion) -> list[int]:
    return [s.id for s in suggestions]


def listed(client: Client, **params) -> list[int]:
    reply = client.get(URL, params)
    assert reply.status_code == 200, reply.content.decode()
    return shown(reply.content.decode())


def test_by_default_only_the_open_ones_applicable_first_most_confident_first(fleet):
    html = signed_in("operator").get(URL).content.decode()
    assert shown(html) == ids(fleet.watched, fleet.elsewhere, fleet.applicable, fleet.report)
    assert "4 suggestions, page 1 of 1" in html


def test_each_state_and_all_of_them(fleet):
    client = signed_in("operator")
    assert listed(client, state="dismissed") == ids(fleet.dismissed)
    assert listed(client, state="cleared") == ids(fleet.cleared)
    assert listed(client, state="improved") == []
    assert len(listed(client, state="all")) == 6


def test_the_kind_filter(fleet):
    client = signed_in("operator")
    assert listed(client, kind="kv_pressure") == ids(fleet.elsewhere, fleet.applicable)
    assert listed(client, kind="host_readiness") == ids(fleet.report)


def test_the_host_filter_takes_a_deployments_host_and_an_engines(fleet):
    client = signed_in("operator")
    assert listed(client, host=fleet.first.id) == ids(fleet.watched, fleet.applicable,
                                                      fleet.report)
    assert listed(client, host=fleet.second.id) == ids(fleet.elsewhere)


def test_the_engine_or_deployment_name_narrows_within_the_host(fleet):
    client = signed_in("operator")
    both_hosts = ids(fleet.elsewhere, fleet.applicable, fleet.report)
    assert listed(client, server="vllm:8000/0") == both_hosts
    assert listed(client, server="vllm:8000/0", host=fleet.second.id) == ids(fleet.elsewhere)
    assert listed(client, server="llama-8b") == ids(fleet.applicable, fleet.report)
    assert listed(client, server="vllm:7000/0") == []


def test_deployments_or_the_engines_pitwall_only_watches(fleet):
    client = signed_in("operator")
    assert listed(client, watched="true") == ids(fleet.watched, fleet.elsewhere)
    assert listed(client, watched="false") == ids(fleet.applicable, fleet.report)


def test_the_filters_combine(fleet):
    client = signed_in("operator")
    found = listed(client, state="all", kind="kv_pressure", watched="false")
    assert sorted(found) == sorted(ids(fleet.applicable, fleet.dismissed))
    assert listed(client, state="cleared", host=fleet.second.id, kind="cpu_starvation") == ids(
        fleet.cleared)
    assert listed(client, state="cleared", host=fleet.first.id) == []


def test_the_form_shows_the_chosen_filters(fleet):
    html = signed_in("operator").get(URL, {"state": "dismissed", "host": fleet.second.id,
                                           "server": "vllm:8000/0"}).content.decode()
    form = re.search(r'<form method="get"[^>]*id="suggestion-filters">.*?</form>', html,
                     re.S).group(0)
    assert '<option value="dismissed" selected>' in form
    assert f'<option value="{fleet.second.id}" selected>h100-node-2</option>' in form
    assert 'name="server" value="vllm:8000/0"' in form


@pytest.mark.parametrize(("params", "problem"), [
    ({"state": "bogus"}, "state: bogus is not a state"),
    ({"kind": "kv"}, "kind: kv is not a kind of suggestion"),
    ({"host": "first"}, "host: no host has id first"),
    ({"host": "99999999999999999999"}, "host: no host has id 99999999999999999999"),
    ({"host": "-1"}, "host: no host has id -1"),
    ({"host": "2147483000"}, "host: no host has id 2147483000"),
    ({"watched": "maybe"}, "watched: maybe is not true or false"),
    ({"server": "v" * 201}, "server: a name is at most 200 characters"),
    ({"server": "vllm\x00"}, "server: Null characters are not allowed."),
    ({"state": "x" * 5000}, "state: " + "x" * 40 + " is not a state"),
])
def test_a_bad_filter_is_a_400_that_names_it(fleet, params, problem):
    reply = signed_in("operator").get(URL, params)
    html = reply.content.decode()
    assert reply.status_code == 400
    assert f'<li class="error">{problem}</li>' in html
    assert shown(html) == [] and 'id="suggestion-filters"' in html


def test_a_page_number_out_of_range_reads_as_the_nearest_page(fleet):
    client = signed_in("operator")
    assert len(listed(client, page="7")) == 4
    assert len(listed(client, page="nope")) == 4


def watched_engines(on: Host, count: int) -> list[Suggestion]:
    """``count`` open reports, one for each of as many engines on ``on``."""
    return [suggest(confidence=0.5, engine=Engine.objects.create(host=on, name=f"vllm:{port}/0"))
            for port in range(10000, 10000 + count)]


def test_pages_of_25_whose_links_keep_the_filters(fleet):
    watched_engines(fleet.second, 30)
    client = signed_in("operator")
    filters = {"state": "open", "kind": "kv_pressure", "host": fleet.second.id,
               "watched": "true"}
    first = client.get(URL, filters).content.decode()
    assert len(shown(first)) == PAGE_SIZE and shown(first)[0] == fleet.elsewhere.id
    assert "31 suggestions, page 1 of 2" in first
    link = re.search(r'<a href="\?([^"]*)" rel="next">', first).group(1).replace("&amp;", "&")
    assert link == f"{urlencode(filters)}&page=2"
    second = client.get(f"{URL}?{link}").content.decode()
    assert len(shown(second)) == 6 and "31 suggestions, page 2 of 2" in second
    assert fleet.applicable.id not in shown(first) + shown(second)


def test_an_action_returns_to_the_same_filtered_page(fleet):
    watched_engines(fleet.second, 30)
    client = signed_in("deployer")
    page = f"{URL}?{urlencode({'host': fleet.second.id, 'page': 2})}"
    html = client.get(page).content.decode()
    target = shown(html)[0]
    assert f'<input type="hidden" name="next" value="{page.replace("&", "&amp;")}">' in html
    reply = client.post(f"{URL}{target}/dismiss/", {"next": page})
    assert reply.status_code == 302 and reply["Location"] == page
    assert Suggestion.objects.get(pk=target).state == "dismissed"


def test_a_viewer_sees_the_filtered_page_without_actions(fleet):
    html = signed_in("viewer").get(URL, {"state": "all"}).content.decode()
    assert len(shown(html)) == 6 and "data-action" not in html


def test_the_evidence_is_one_click_away_with_its_chart_link(fleet):
    html = signed_in("operator").get(URL, {"host": fleet.second.id}).content.decode()
    folded = re.search(r'<details class="evidence">\s*<summary>Evidence: 1 measurement</summary>'
                       r'.*?</details>', html, re.S).group(0)
    engine = fleet.elsewhere.engine_id
    assert f'href="/engines/{engine}/?from=' in folded and '<td class="n">0.97</td>' in folded


QUERIES = 11  # session, user, 2 permission lists, firing alerts (the menu), count, page,
#                the chosen host, the hosts to choose from, 2 lists of names offered


@pytest.mark.parametrize("reports", [5, 60])
def test_the_pages_queries_do_not_grow_with_the_fleet(fleet, reports,
                                                      django_assert_max_num_queries):
    watched_engines(fleet.second, reports)
    client = signed_in("deployer")
    for params in ({}, {"state": "all", "host": fleet.second.id, "server": "vllm:10001/0"}):
        with django_assert_max_num_queries(QUERIES):
            assert client.get(URL, params).status_code == 200


def test_the_api_filters_by_host_and_by_who_runs_the_server(fleet):
    user_with_role("reader", "viewer")
    api = bearer_client(issue_api_token("reader", name="tests"))

    def found(**params) -> set[int]:
        reply = api.get("/api/v1/suggestions/", {"state": "open", **params})
        assert reply.status_code == 200, reply.json()
        return {row["id"] for row in reply.json()["results"]}

    assert found(host=fleet.second.id) == {fleet.elsewhere.id}
    assert found(watched="true") == {fleet.watched.id, fleet.elsewhere.id}
    assert found(watched="false", host=fleet.first.id) == {fleet.applicable.id, fleet.report.id}
    for bad in ({"watched": "maybe"}, {"host": "first"}):
        reply = api.get("/api/v1/suggestions/", bad)
        assert reply.status_code == 400 and set(reply.json()) == set(bad)
