"""A real Prometheus scrapes a running Pitwall: its own health (``/metrics``, summed over
the server's processes) and the fleet (``/api/v1/export/prometheus``), with the credential
and the scrape config docs/prometheus.md gives; PromQL then answers with the fleet's values,
and promtool finds no error in either exposition."""

from __future__ import annotations

import sys
import urllib.request

import pytest

from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from tests.support.live import Process, free_port, server_env, sim_agent, start_server
from tests.support.polling import wait_until
from tests.support.prometheus import PrometheusServer, accepted_export_lint, promtool_check
from tests.support.roles import user_with_role

pytestmark = pytest.mark.slow(seconds=40)

HOSTS = {"prom-host-1": 3, "prom-host-2": 2}  # hostname -> simulated GPUs

SCRAPE_CONFIG = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: pitwall
    metrics_path: /metrics
    authorization:
      credentials_file: {token_file}
    static_configs:
      - targets: ["127.0.0.1:{port}"]
  - job_name: pitwall-fleet
    metrics_path: /api/v1/export/prometheus
    # Histograms of the last 60 s of raw rows: the default, the newest rolled-up minute, would
    # need the rollup task and minutes (tests/api/test_export_prometheus.py covers it).
    params: {{histograms: [window]}}
    authorization:
      credentials_file: {token_file}
    static_configs:
      - targets: ["127.0.0.1:{port}"]
"""


@pytest.fixture
def fleet(empty_samples, tmp_path):
    """A server of several processes' metrics (multiprocess mode, as make run starts it), two
    simulated hosts, one of them serving an engine; a read-only token for Prometheus."""
    user_with_role("prometheus", "viewer")
    token_file = tmp_path / "pitwall-token"
    token_file.write_text(issue_api_token("prometheus", name="prometheus", scope="read"))
    (tmp_path / "metrics").mkdir()
    port, vllm_port = free_port(), free_port()
    env = {**server_env(), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")}
    server = start_server(port, tmp_path / "server.log", env)
    vllm = Process([sys.executable, "-m", "agents.sim.vllm_server", "--port", str(vllm_port),
                    "--gpu-indices", "0", "--load", "20", "--seed", "3"],
                   log=tmp_path / "vllm.log")
    agents = []
    for i, (hostname, gpus) in enumerate(HOSTS.items()):
        agent_token = tmp_path / f"{hostname}.token"
        agent_token.write_text(issue_agent_token(hostname)[0])
        extra = ("--vllm-metrics-url", f"http://127.0.0.1:{vllm_port}/metrics") if i == 0 else ()
        agents.append(sim_agent(port, agent_token, hostname, tmp_path / f"spool-{i}",
                                gpus=gpus, interval=0.5, extra=extra,
                                log=tmp_path / f"{hostname}.log"))
    prometheus = PrometheusServer(tmp_path / "prometheus", SCRAPE_CONFIG.format(
        token_file=token_file, port=port))
    yield prometheus, port, token_file.read_text()
    prometheus.stop()
    for process in (*agents, vllm, server):
        process.stop()


def value(prometheus: PrometheusServer, promql: str) -> float | None:
    result = prometheus.query(promql)
    return float(result[0]["value"][1]) if result else None


def fetch(port: int, path: str, token: str) -> bytes:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.read()


def test_prometheus_scrapes_the_fleet_and_pitwalls_own_health(fleet):
    prometheus, port, token = fleet
    gpus = sum(HOSTS.values())
    wait_until(lambda: value(prometheus, "count(pitwall_gpu_util_pct)") == gpus, 90,
               lambda: f"GPUs seen by Prometheus: {prometheus.query('count(pitwall_gpu_util_pct)')}"
                       f"; targets: {prometheus.targets()}")
    # Each job's first scrape comes at its own offset within the interval: wait for both.
    wait_until(lambda: {t: h["health"] for t, h in prometheus.targets().items()} == {
        "pitwall": "up", "pitwall-fleet": "up"}, 30, lambda: f"targets: {prometheus.targets()}")
    by_host = {r["metric"]["hostname"]: float(r["value"][1]) for r in prometheus.query(
        "count by (hostname) (pitwall_gpu_util_pct)")}
    assert by_host == {h: float(n) for h, n in HOSTS.items()}
    # The engine's TTFT p99 from the exposed histogram, as docs/prometheus.md computes it.
    p99 = wait_until(lambda: value(prometheus, "histogram_quantile(0.99, sum by (le, engine) "
                                               "(pitwall_engine_ttft_seconds_bucket))"), 90)
    assert p99 > 0
    # Pitwall's own health: the batches the agents sent were stored and counted, across the
    # server's processes (multiprocess mode).
    stored = wait_until(lambda: value(
        prometheus, 'pitwall_ingest_batches_total{outcome="stored"}'), 30)
    assert stored >= gpus  # two agents at 2 Hz for longer than the GPUs took to show
    assert value(prometheus, "pitwall_ingest_writer_queue_batches") is not None
    # No error in either; the fleet's lint findings are the accepted ones (its names are the
    # catalog's), Pitwall's own metrics have none.
    assert promtool_check(fetch(port, "/metrics", token)) == (0, set())
    fleet_check = promtool_check(fetch(port, "/api/v1/export/prometheus", token))
    assert fleet_check.returncode in (0, 3), fleet_check
    assert fleet_check.findings <= accepted_export_lint()
