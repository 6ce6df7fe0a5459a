"""Debian's Prometheus and Alertmanager as processes of a test: a free port, a temporary
directory, a config written for the test, stopped by pid (never the packages' services)."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import NamedTuple

from tests.support.live import Process, free_port
from tests.support.polling import wait_until


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        package = {"promtool": "prometheus"}.get(name, name)
        raise AssertionError(f"{name} is missing: make test installs Debian's {package}")
    return path


def get_json(url: str, timeout: float = 5) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.loads(reply.read())


class Daemon:
    """One of the two programs on a free port, its files in ``workdir``, once ``/-/ready``
    answers; ``argv`` gets the listen address appended."""

    def __init__(self, name: str, argv: list[str], workdir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = Process([*argv, f"--web.listen-address=127.0.0.1:{self.port}"],
                               log=workdir / f"{name}.log")
        wait_until(self._ready, 60, lambda: f"{name} did not start:\n"
                                            f"{self.process.output()[-3000:]}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            if self.process.proc.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited:\n{self.process.output()[-3000:]}") from None
            return False

    def stop(self) -> None:
        self.process.stop()


class PrometheusServer(Daemon):
    """A Prometheus scraping what ``config`` (a prometheus.yml as text) names."""

    def __init__(self, workdir: Path, config: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(config)
        super().__init__("prometheus", [
            binary("prometheus"), f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}"], workdir)

    def query(self, promql: str) -> list[dict]:
        """The instant vector ``promql`` gives now: [{"metric": {...}, "value": [t, "v"]}]."""
        reply = get_json(f"{self.url}/api/v1/query?"
                         + urllib.parse.urlencode({"query": promql}))
        assert reply["status"] == "success", reply
        return reply["data"]["result"]

    def targets(self) -> dict[str, dict]:
        """job -> its first active target (health, lastError)."""
        active = get_json(f"{self.url}/api/v1/targets")["data"]["activeTargets"]
        return {t["labels"]["job"]: t for t in active}


class Promtool(NamedTuple):
    returncode: int  # 0: clean; 3: lint findings only; 1: an error (unparsable exposition)
    findings: set[str]


def promtool_check(exposition: bytes) -> Promtool:
    """What ``promtool check metrics`` says of an exposition."""
    check = subprocess.run([binary("promtool"), "check", "metrics"], input=exposition,
                           capture_output=True, timeout=60)
    said = {line.strip() for line in (check.stdout + check.stderr).decode().splitlines()
            if line.strip()}
    return Promtool(check.returncode, said)


def accepted_export_lint() -> set[str]:
    """promtool's lint findings on the fleet exposition, each accepted (docs/prometheus.md):
    the catalog's names are the public contract. Its ``*_total`` gauges are NVML's cumulative
    counts sent as they are (ECC, NVLink errors, PCIe replays); the rates are named
    ``*_per_s``, an abbreviated unit to promtool."""
    from agents.protocol import metrics_of

    def exported(metric) -> str:
        return f"pitwall_{metric.name.replace('.', '_')}"

    catalog = [m for entity in ("host", "gpu", "engine") for m in metrics_of(entity)]
    totals = {exported(m) for m in catalog if m.kind == "gauge" and m.name.endswith("_total")}
    rates = {exported(m) for m in catalog if m.name.endswith("_per_s")}
    return {*(f'{name} non-counter metrics should not have "_total" suffix' for name in totals),
            *(f"{name} metric names should not contain abbreviated units" for name in rates)}
