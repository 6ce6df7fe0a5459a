"""VllmCollector's default fetch (urllib) against a local HTTP server: a page, an error
status, a server that does not answer in time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.collectors.vllm import VllmCollector
from tests.agents.vllm_samples import sample_text, series

V0_33 = "v1-synthetic-vllm-0.33.0.txt"


@pytest.fixture
def metrics_url() -> Iterator[str]:
    page = sample_text(V0_33).encode()
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/slow":
                release.wait()
                return
            status = 200 if self.path == "/metrics" else 500
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    release.set()
    httpd.shutdown()
    httpd.server_close()


def test_it_scrapes_a_real_http_endpoint_past_any_proxy_in_the_environment(metrics_url,
                                                                           monkeypatch):
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    collector = VllmCollector(f"{metrics_url}/metrics")
    (sample,) = collector.collect()
    assert sample["up"] == 1
    assert sample["requests_running"] == series(sample_text(V0_33), "vllm:num_requests_running")


def test_an_http_500_is_down_with_a_warning_naming_the_status(metrics_url):
    warnings: list[str] = []
    collector = VllmCollector(f"{metrics_url}/broken", warn=warnings.append)
    assert collector.collect()[0]["up"] == 0
    assert "HTTP 500" in warnings[0]


def test_a_server_that_does_not_answer_in_time_is_down(metrics_url):
    warnings: list[str] = []
    collector = VllmCollector(f"{metrics_url}/slow", timeout=0.2, warn=warnings.append)
    assert collector.collect()[0]["up"] == 0
    assert "no answer within 0.2 s" in warnings[0]
