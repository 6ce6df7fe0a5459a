"""What the agent accepts of the control plane's ``routers``, and how it reads a router's
Prometheus page (the pages below are vllm-router 0.1.17's own, trimmed)."""

from __future__ import annotations

from typing import Any

import pytest

from agents.router.admin import RouterAdminError, Worker, parse_metrics
from agents.router.spec import MAX_WORKERS, RouterSpec, RouterSpecError, parse_routers
from agents.supervisor.spec import SpecError


def router(**overrides: Any) -> dict[str, Any]:
    return {"service_id": 3, "service": "llama", "port": 9000, "policy": "power_of_two",
            "workers": ["http://10.0.0.5:8001", "http://10.0.0.6:8001"],
            "model": "meta-llama/Llama-3.1-8B-Instruct", **overrides}


def test_the_contracts_example_parses_whole():
    (spec,) = parse_routers([router()]).values()
    assert spec == RouterSpec(3, "llama", 9000, "power_of_two",
                              ("http://10.0.0.5:8001", "http://10.0.0.6:8001"),
                              "meta-llama/Llama-3.1-8B-Instruct")
    assert spec.process_key == (9000, "power_of_two", 0)  # no hold: the router's own retries


def test_a_hold_is_part_of_what_the_router_is_started_with():
    (spec,) = parse_routers([router(hold_s=300)]).values()
    assert spec.hold_s == 300 and spec.process_key == (9000, "power_of_two", 300)


@pytest.mark.parametrize("hold", [-1, 3601, 1.5, True, "300", None])
def test_a_hold_that_is_not_whole_seconds_within_an_hour_is_refused(hold):
    with pytest.raises(RouterSpecError, match="router of service 3: hold_s must be an "
                                              "integer in 0-3600"):
        parse_routers([router(hold_s=hold)])


def test_no_workers_and_ipv6_hostname_and_https_workers_are_fine():
    workers = ["http://[fd00::5]:8001", "https://gpu-b.rack_3.example:443"]
    (spec,) = parse_routers([router(workers=workers)]).values()
    assert spec.workers == tuple(workers)
    assert parse_routers([router(workers=[])])[3].workers == ()


@pytest.mark.parametrize(("worker", "said"), [
    ("ftp://10.0.0.5:8001", "http(s)://host:port"),
    ("http://10.0.0.5", "http(s)://host:port"),  # no port: the router would store it so
    ("http://10.0.0.5:8001/", "http(s)://host:port"),
    ("http://10.0.0.5:8001/v1?x=1", "http(s)://host:port"),
    ("http://user@10.0.0.5:8001", "http(s)://host:port"),
    ("http://10.0.0.5:0", "http(s)://host:port"),
    ("http://10.0.0.5:99999", "valid port"),
    ("http://-x:8001", "http(s)://host:port"),
    ("http://a b:8001", "http(s)://host:port"),
    ("", "non-empty string"),
    (7, "non-empty string"),
    ("http://" + "a" * 300 + ":8001", "at most 300"),
])
def test_a_worker_that_is_not_a_plain_url_refuses_the_list(worker, said):
    with pytest.raises(RouterSpecError, match="router of service 3") as refused:
        parse_routers([router(workers=["http://10.0.0.5:8001", worker])])
    assert said in str(refused.value)


@pytest.mark.parametrize(("overrides", "said"), [
    ({"workers": [f"http://10.0.0.5:{8000 + i}" for i in range(MAX_WORKERS + 1)]},
     "65 workers: at most 64"),
    ({"workers": ["http://10.0.0.5:8001", "http://10.0.0.5:8001"]}, "listed twice"),
    ({"workers": "http://10.0.0.5:8001"}, "must be a list"),
    ({"policy": "fastest"}, "policy 'fastest' is not one of"),
    ({"policy": None}, "policy None is not one of"),
    ({"port": 0}, "port must be an integer in 1-65535"),
    ({"port": "9000"}, "port must be an integer"),
    ({"port": True}, "port must be an integer"),
    ({"service_id": 0}, "service_id must be a positive integer"),
    ({"service_id": True}, "service_id must be a positive integer"),
    ({"service": "x" * 301}, "service must be a string of at most 300"),
    ({"model": ["m"]}, "model must be a string"),
])
def test_a_bad_field_is_named(overrides, said):
    with pytest.raises(RouterSpecError, match=said):
        parse_routers([router(**overrides)])


def test_missing_fields_and_the_list_itself():
    with pytest.raises(RouterSpecError, match="router of service 3: missing port"):
        parse_routers([{k: v for k, v in router().items() if k != "port"}])
    with pytest.raises(RouterSpecError, match="must be an object"):
        parse_routers(["llama"])
    with pytest.raises(RouterSpecError, match="routers must be a list"):
        parse_routers({"3": router()})
    with pytest.raises(RouterSpecError, match="at most 64"):
        parse_routers([router(service_id=i, port=9000 + i) for i in range(1, 66)])


def test_two_routers_on_one_port_or_one_service_twice_are_refused():
    with pytest.raises(RouterSpecError, match="services 3 and 4 both ask for port 9000"):
        parse_routers([router(), router(service_id=4)])
    with pytest.raises(RouterSpecError, match="service 3 is listed twice"):
        parse_routers([router(), router(port=9001)])


def test_a_refusal_is_a_spec_error_like_a_deployments():
    assert issubclass(RouterSpecError, SpecError)


# vllm-router 0.1.17 with --policy round_robin: the processed counter per worker.
ROUND_ROBIN_PAGE = """\
# TYPE vllm_router_requests_total counter
vllm_router_requests_total{route="/v1/completions"} 4
vllm_router_requests_total{route="/v1/chat/completions"} 2
# TYPE vllm_router_processed_requests_total counter
vllm_router_processed_requests_total{worker="http://127.0.0.1:18102"} 2
vllm_router_processed_requests_total{worker="http://127.0.0.1:18101"} 3
vllm_router_processed_requests_total{worker="http://127.0.0.1:18109"} 1
# TYPE vllm_router_cb_outcomes_total counter
vllm_router_cb_outcomes_total{worker="http://127.0.0.1:18101",outcome="success"} 3
# TYPE vllm_router_worker_health gauge
vllm_router_worker_health{worker="http://127.0.0.1:18102"} 0
vllm_router_worker_health{worker="http://127.0.0.1:18101"} 1
# TYPE vllm_router_running_requests gauge
vllm_router_running_requests{worker="http://127.0.0.1:18101"} 2
"""
# The same router with --policy power_of_two keeps no processed counter: the circuit
# breaker's outcomes count every request a worker served or failed.
POWER_OF_TWO_PAGE = """\
# TYPE vllm_router_requests_total counter
vllm_router_requests_total{route="/v1/completions"} 6
# TYPE vllm_router_cb_outcomes_total counter
vllm_router_cb_outcomes_total{worker="http://127.0.0.1:18102",outcome="success"} 3
vllm_router_cb_outcomes_total{worker="http://127.0.0.1:18101",outcome="success"} 2
vllm_router_cb_outcomes_total{worker="http://127.0.0.1:18101",outcome="failure"} 1
# TYPE vllm_router_running_requests gauge
vllm_router_running_requests{worker="http://127.0.0.1:18102"} 0
"""
LISTED = [Worker("http://127.0.0.1:18101", True), Worker("http://127.0.0.1:18102", True)]


def test_the_counts_are_the_listed_workers_own():
    found = parse_metrics(ROUND_ROBIN_PAGE, LISTED).as_json()
    assert found == {"requests_total": 6, "no_worker_tries": 0, "per_worker": {
        "http://127.0.0.1:18101": {"processed": 3, "running": 2, "healthy": 1},
        "http://127.0.0.1:18102": {"processed": 2, "running": 0, "healthy": 0}}}


def test_without_the_processed_counter_the_outcomes_count():
    found = parse_metrics(POWER_OF_TWO_PAGE, LISTED).as_json()["per_worker"]
    assert found["http://127.0.0.1:18101"]["processed"] == 3
    assert found["http://127.0.0.1:18102"]["processed"] == 3


def test_a_worker_the_page_does_not_name_yet_counts_zero_with_its_listed_health():
    found = parse_metrics("", [Worker("http://127.0.0.1:9", False)]).as_json()
    assert found == {"requests_total": 0, "no_worker_tries": 0, "per_worker": {
        "http://127.0.0.1:9": {"processed": 0, "running": 0, "healthy": 0}}}


# The same router with no worker, after a request held in its retries (and one that timed
# out before): each try that found no worker is counted, the request itself is not.
NO_WORKER_PAGE = """\
# TYPE vllm_router_request_errors_total counter
vllm_router_request_errors_total{route="/v1/completions",error_type="no_available_workers"} 25
vllm_router_request_errors_total{route="/v1/chat/completions",error_type="no_available_workers"} 4
vllm_router_request_errors_total{route="/v1/completions",error_type="upstream_error"} 2
# TYPE vllm_router_retries_total counter
vllm_router_retries_total{route="/v1/completions"} 23
# TYPE vllm_router_active_workers gauge
vllm_router_active_workers 0
"""


def test_the_tries_that_found_no_worker_are_counted_over_the_routes():
    found = parse_metrics(NO_WORKER_PAGE, []).as_json()
    assert found == {"requests_total": 0, "no_worker_tries": 29, "per_worker": {}}


def test_a_page_that_is_not_prometheus_text_says_so():
    with pytest.raises(RouterAdminError, match="not the Prometheus text format"):
        parse_metrics('vllm_router_requests_total{route="/v1 7\n', LISTED)


def test_counts_are_bounded_whole_numbers():
    page = ('vllm_router_running_requests{worker="http://127.0.0.1:18101"} 1e30\n'
            'vllm_router_processed_requests_total{worker="http://127.0.0.1:18101"} NaN\n'
            'vllm_router_worker_health{worker="http://127.0.0.1:18101"} 7\n'
            'vllm_router_requests_total{route="/v1/completions"} -3\n')
    found = parse_metrics(page, LISTED[:1]).as_json()
    assert found == {"requests_total": 0, "no_worker_tries": 0, "per_worker": {
        "http://127.0.0.1:18101": {"processed": 0, "running": 2**31 - 1, "healthy": 1}}}
