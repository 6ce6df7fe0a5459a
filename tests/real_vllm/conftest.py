"""Fixtures of the real-vLLM suite (`make test-real-vllm`)."""

from __future__ import annotations

import pytest

from tests.real_vllm.engine import Install, RealVllm, install


@pytest.fixture(scope="session")
def vllm_install() -> Install:
    return install()


@pytest.fixture(scope="module")
def real_vllm(vllm_install, tmp_path_factory):
    """One real engine shared by a module's tests that only read from it."""
    engine = RealVllm(vllm_install, tmp_path_factory.mktemp("vllm"))
    engine.wait_ready()
    yield engine
    engine.stop()
