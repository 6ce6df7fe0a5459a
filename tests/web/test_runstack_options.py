"""`manage.py runstack`'s flags reach the processes it starts (the stack-cost benchmark runs it
with --sim-hosts 0 and --celery-loglevel info)."""

from __future__ import annotations

import os
from pathlib import Path

from controlplane.devstack.management.commands.runstack import Command, server_children


def options(*argv: str) -> dict:
    return vars(Command().create_parser("manage.py", "runstack").parse_args(list(argv)))


def celery_loglevels(opts: dict) -> dict[str, str]:
    children = server_children(opts, Path("/var-dir"))
    return {c.name: c.argv[c.argv.index("--loglevel") + 1] for c in children
            if c.name.startswith("celery")}


def test_celery_logs_warnings_only_by_default(monkeypatch):
    monkeypatch.delenv("PITWALL_CELERY_LOGLEVEL", raising=False)
    assert celery_loglevels(options()) == {"celery-worker": "warning", "celery-beat": "warning"}


def test_celery_loglevel_flag_reaches_worker_and_beat():
    assert celery_loglevels(options("--celery-loglevel", "info")) == {
        "celery-worker": "info", "celery-beat": "info"}


def test_celery_loglevel_from_the_environment(monkeypatch):
    monkeypatch.setenv("PITWALL_CELERY_LOGLEVEL", "info")
    assert celery_loglevels(options())["celery-worker"] == "info"


def test_the_server_children_are_web_worker_and_beat_and_no_fleet():
    opts = options("--sim-hosts", "0", "--port", "18999", "--web-workers", "2")
    children = server_children(opts, Path("/var-dir"))
    assert [c.name for c in children] == ["web", "celery-worker", "celery-beat"]
    web = children[0].argv
    assert web[web.index("--port") + 1] == "18999" and web[web.index("--workers") + 1] == "2"
    assert opts["sim_hosts"] == 0


def test_the_server_children_share_one_metrics_directory_and_the_fleet_does_not(monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    children = server_children(options(), Path("/var-dir"))
    # /metrics sums what every server process counted (docs/prometheus.md); the simulated
    # fleet, started later from the runner's own environment, must not write there.
    assert {c.name: c.env.get("PROMETHEUS_MULTIPROC_DIR") for c in children} == {
        "web": "/var-dir/metrics", "celery-worker": "/var-dir/metrics",
        "celery-beat": "/var-dir/metrics"}
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ
