"""Reading what a page rendered: its live/page config and its charts."""

from __future__ import annotations

import json
import re

from django.test import Client

from controlplane.fleet.models import Host


def page_config(response) -> dict:
    match = re.search(r'<script id="page-config" type="application/json">(.*?)</script>',
                      response.content.decode(), re.S)
    assert match, "the page carries no page-config"
    return json.loads(match.group(1))


def chart_metrics(response) -> set[str]:
    """Every metric some chart of the page draws."""
    found = re.findall(r'data-chart="[^"]+" data-kind="[^"]+" data-unit="[^"]*" '
                       r'data-metric="([^"]+)"', response.content.decode())
    return {m for group in found for m in group.split()}


def chart_lines(response, chart_id: str) -> list[dict]:
    match = re.search(rf'id="chart-{chart_id}"[^>]*data-lines="([^"]+)"',
                      response.content.decode())
    assert match, f"no chart {chart_id}"
    return json.loads(match.group(1).replace("&quot;", '"'))


def assert_sends_to_login(path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def host_path(host: Host) -> str:
    return f"/hosts/{host.id}/"
