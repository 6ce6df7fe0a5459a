"""uPlot comes from npm (node_modules, not the repository) and resolves as a static file; the
pages' own modules exist under the names the templates and imports use."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.templatetags.static import static

from tests.support.live import ROOT

WEB_STATIC = ROOT / "controlplane" / "web" / "static" / "web"
UPLOT = ["vendor/uplot/uPlot.esm.js", "vendor/uplot/uPlot.min.css"]


@pytest.mark.parametrize("page", ["host", "engine", "gpu"])
def test_every_chart_page_links_uplot_and_its_own_module(operator_client, page_fleet, page):
    ids = {"host": page_fleet.host.id, "engine": page_fleet.engine.id, "gpu": page_fleet.gpu0.id}
    html = operator_client.get(f"/{page}s/{ids[page]}/").content.decode()
    for name in UPLOT:
        assert static(name) in html
    assert f'<script type="module" src="{static(f"web/{page}.js")}">' in html


@pytest.mark.parametrize("name", [*UPLOT, "web/fleet.js", "web/pitwall.css"])
def test_the_static_files_resolve_without_collectstatic(operator_client, name):
    assert finders.find(name), f"{name} not found: run `npm ci` (make install does)"
    response = operator_client.get(static(name))
    assert response.status_code == 200
    assert b"".join(response.streaming_content if response.streaming else [response.content])


def test_uplot_is_installed_by_npm_not_copied_into_the_repository():
    assert Path(finders.find(UPLOT[0])).is_relative_to(ROOT / "node_modules")
    assert not list((ROOT / "controlplane").rglob("uPlot*"))


def test_every_relative_import_of_the_modules_exists():
    for module in WEB_STATIC.glob("*.js"):
        for target in re.findall(r'from "(\./[^"]+)"', module.read_text()):
            assert (WEB_STATIC / target).is_file(), f"{module.name} imports missing {target}"
