"""Shared pieces of the benchmarks: a bench database, a server process, CPU accounting."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
BENCH_DB = os.environ.get("PITWALL_BENCH_DB", "pitwall_bench")


def bench_env(**extra: str) -> dict[str, str]:
    base = os.environ.get("DATABASE_URL", "postgres://127.0.0.1:5432/pitwall")
    url = base.rsplit("/", 1)[0] + "/" + BENCH_DB
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "controlplane.settings",
           "SECURE_SSL_REDIRECT": "false", "LOG_LEVEL": "WARNING", **extra}
    env.setdefault("SECRET_KEY", "bench-secret-key")
    return env


def manage(*args: str, env: dict | None = None) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env or bench_env(),
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def fresh_database(env: dict) -> None:
    """Drop and recreate the bench database, then migrate it."""
    import psycopg

    with psycopg.connect("host=127.0.0.1 dbname=postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")
    manage("migrate", "--no-input", "-v", "0", env=env)


@contextmanager
def server(env: dict, port: int, workers: int = 1):
    argv = [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host",
            "127.0.0.1", "--port", str(port), "--workers", str(workers), "--log-level",
            "warning", "--no-access-log", "--loop", "uvloop", "--http", "httptools"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.3)
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)


def process_tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def postgres_processes() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["name"]) if p.info["name"] in ("postgres",)
            or (p.info["name"] or "").startswith("postgres")]


class CpuMeter:
    """CPU seconds used by a set of processes between start() and stop()."""

    def __init__(self, find) -> None:
        self.find = find
        self.before: dict[int, float] = {}

    @staticmethod
    def _cpu(procs) -> dict[int, float]:
        out = {}
        for p in procs:
            try:
                t = p.cpu_times()
                out[p.pid] = t.user + t.system
            except psutil.Error:
                pass
        return out

    def start(self) -> None:
        self.before = self._cpu(self.find())

    def stop(self) -> float:
        after = self._cpu(self.find())
        return sum(after[pid] - self.before.get(pid, 0.0) for pid in after)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), {psutil.virtual_memory().total / 2**30:.0f} GiB"
