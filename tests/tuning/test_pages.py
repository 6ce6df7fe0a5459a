"""The Tuning page lists both kinds: a deployment's suggestion (Accept and apply) and a report
on an engine Pitwall does not run (its command fragment, no Accept); the page's actions on a
report refuse accept with the reason and dismiss it."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from controlplane.fleet.models import Engine
from controlplane.tuning.models import Suggestion
from tests.support.roles import user_with_role
from tests.tuning.factories import deployment, gpus, host

pytestmark = pytest.mark.django_db

EVIDENCE = {"metric": "engine.kv_cache_usage", "stat": "avg", "value": 0.97,
            "threshold": ">= 0.9", "entity": "engine", "start": "2026-12-03T11:50:00+00:00",
            "end": "2026-12-03T12:00:00+00:00"}


@pytest.fixture
def both() -> tuple[Suggestion, Suggestion]:
    h = host()
    gpus(h)
    d = deployment(h)
    own = Engine.objects.create(host=h, name="vllm:8000/0")
    watched = Engine.objects.create(host=h, name="vllm:9000/0")
    common = {"kind": "kv_pressure", "reasoning": "KV cache averaged 97 %.", "confidence": 0.8,
              "expected": "Fewer preemptions.", "severity": 0.8}
    mine = Suggestion.objects.create(
        deployment=d, engine=own, revision=d.revision, **common,
        changes=[{"field": "args.gpu_memory_utilization", "current": 0.9, "proposed": 0.95}],
        evidence=[{**EVIDENCE, "entity_id": own.id}])
    report = Suggestion.objects.create(
        engine=watched, **common, command="--max-num-seqs 96",
        changes=[{"field": "args.max_num_seqs", "current": 120, "proposed": 96}],
        evidence=[{**EVIDENCE, "entity_id": watched.id}])
    return mine, report


def signed_in(role: str) -> Client:
    client = Client()
    client.force_login(user_with_role(f"user-{role}", role))
    return client


def article(html: str, s: Suggestion) -> str:
    match = re.search(rf'<article[^>]*id="suggestion-{s.id}".*?</article>', html, re.S)
    assert match, f"suggestion {s.id} not on the page"
    return match.group(0)


def test_the_tuning_page_lists_a_deployments_suggestion_and_an_engines_report(both):
    mine, report = both
    html = signed_in("deployer").get("/suggestions/").content.decode()
    own = article(html, mine)
    assert f'href="/deployments/{mine.deployment_id}/"' in own
    assert 'data-action="accept"' in own and "not run by Pitwall" not in own
    theirs = article(html, report)
    assert f'href="/engines/{report.engine_id}/"' in theirs and "vllm:9000/0" in theirs
    assert "not run by Pitwall" in theirs and "<code>--max-num-seqs 96</code>" in theirs
    assert 'data-action="accept"' not in theirs and 'data-action="dismiss"' in theirs
    assert f'href="/engines/{report.engine_id}/?from=' in theirs  # the evidence's chart


def test_a_read_only_role_sees_both_without_actions(both):
    html = signed_in("operator").get("/suggestions/").content.decode()
    assert all(article(html, s) for s in both) and "data-action" not in html


def test_the_pages_accept_of_a_report_says_why_not_and_dismiss_works(both):
    _, report = both
    client = signed_in("deployer")
    reply = client.post(f"/suggestions/{report.id}/accept/", follow=True)
    assert reply.redirect_chain[-1][0] == "/suggestions/"
    assert "Pitwall does not run this engine" in reply.content.decode()
    assert Suggestion.objects.get(pk=report.pk).state == "open"
    client.post(f"/suggestions/{report.id}/dismiss/")
    assert Suggestion.objects.get(pk=report.pk).state == "dismissed"


def test_an_engines_page_lists_its_own_open_suggestions_with_the_actions_allowed(both):
    mine, report = both
    deployer = signed_in("deployer")
    watched = deployer.get(f"/engines/{report.engine_id}/").content.decode()
    section = re.search(r'<section id="tuning">.*?</section>', watched, re.S).group(0)
    assert "<code>--max-num-seqs 96</code>" in article(section, report)
    assert f'id="suggestion-{mine.id}"' not in section  # another engine's
    assert 'data-action="dismiss"' in section and 'data-action="accept"' not in section
    own = deployer.get(f"/engines/{mine.engine_id}/").content.decode()
    assert 'data-action="accept"' in article(own, mine)
    viewer = signed_in("viewer").get(f"/engines/{report.engine_id}/").content.decode()
    assert "<code>--max-num-seqs 96</code>" in viewer and "data-action" not in viewer


def test_an_engine_without_open_suggestions_says_so(both):
    _, report = both
    report.state = "dismissed"
    report.save()
    html = signed_in("viewer").get(f"/engines/{report.engine_id}/").content.decode()
    section = re.search(r'<section id="tuning">.*?</section>', html, re.S).group(0)
    assert "No open suggestion" in section and "suggestion-" not in section
