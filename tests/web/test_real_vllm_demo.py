"""`PITWALL_REAL_VLLM=1 make run`: the host and service it adds, and what it says when the
real vLLM is not installed. (The engine itself runs in the real-vLLM suite.)"""

from __future__ import annotations

import pytest
from django.utils import timezone

from agents import vllm_args
from controlplane.devstack.real_vllm_demo import (
    ARGS,
    REPLICAS,
    VLLM_VERSION,
    NotInstalled,
    RealVllmDemo,
)
from controlplane.fleet.models import Deployment, Host, Service


@pytest.fixture
def demo(tmp_path) -> RealVllmDemo:
    return RealVllmDemo(tmp_path / "venv", tmp_path / "model", 18400, tmp_path / "var",
                        "cpu-box", "none")


def test_without_the_install_it_names_the_make_target(monkeypatch, tmp_path):
    monkeypatch.setenv("PITWALL_VLLM_VENV", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PITWALL_TINY_MODEL", str(tmp_path / "nothing"))
    with pytest.raises(NotInstalled, match="make real-vllm"):
        RealVllmDemo.from_env(tmp_path)


def test_its_arguments_are_valid_for_the_installed_release():
    assert vllm_args.validate(ARGS, VLLM_VERSION) == []


def test_no_service_until_the_agent_has_reported_its_router_role(db, demo):
    assert demo.ensure_service() is False
    Host.objects.create(hostname="cpu-box", last_seen=timezone.now())
    assert demo.ensure_service() is False
    assert not Service.objects.exists() and not Deployment.objects.exists()


def test_the_service_runs_the_cpu_build_without_gpus_and_is_made_once(db, demo):
    Host.objects.create(hostname="cpu-box", last_seen=timezone.now(), cpu_count=2,
                        inventory={"roles": ["router"], "port_range": [18401, 18420]})
    assert demo.ensure_service() is True
    assert demo.ensure_service() is True

    [service] = Service.objects.all()
    assert service.router_port == 18400 and service.router_host.hostname == "cpu-box"
    replicas = list(Deployment.objects.filter(service=service).order_by("replica"))
    assert len(replicas) == REPLICAS and service.unplaced == 0
    assert {d.port for d in replicas} <= set(range(18401, 18421))
    for d in replicas:
        assert d.gpu_indices == [] and d.vllm_version == VLLM_VERSION
        assert d.model == str(demo.model) and d.revision == 1
    # Its compile caches stay in its own directory; its sockets in a short one (a Unix socket
    # path holds 107 characters, and pytest's tmp_path alone is longer than the limit allows).
    env = replicas[0].env
    assert env["VLLM_CACHE_ROOT"].startswith(str(demo.workdir))
    assert env["TMPDIR"].endswith("pitwall-vllm-18400") and env["HF_HUB_OFFLINE"] == "1"


def test_the_agent_supervises_real_vllm_from_its_environment(demo, tmp_path):
    argv = demo.agent("http://127.0.0.1:8000", tmp_path / "token").argv
    assert "--supervise" in argv and argv[argv.index("--gpu-backend") + 1] == "none"
    assert argv[argv.index("--vllm-command") + 1] == f"{demo.venv}/bin/vllm serve"
    assert "--router" in argv and argv[argv.index("--port-range") + 1] == "18401-18420"
