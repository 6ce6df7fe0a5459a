"""Real processes for end-to-end tests: the ASGI server, agents, simulated vLLM servers."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from django.db import connection

from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env() -> dict[str, str]:
    """The environment for a server process that uses the test database of this session."""
    db = connection.settings_dict
    url = f"postgres://{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    if db.get("USER"):
        url = url.replace("://", f"://{db['USER']}:{db.get('PASSWORD', '')}@", 1)
    return {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.settings",
            "LOG_LEVEL": "WARNING"}


class Process:
    def __init__(self, argv: list[str], env: dict | None = None, log: Path | None = None):
        self.argv = argv
        self.log = log
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed in stop()
        self._out = out
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env or os.environ.copy(), stdout=out,
                                     stderr=subprocess.STDOUT)

    def stop(self, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._out is not subprocess.DEVNULL:
            self._out.close()
        return self.proc.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log else ""


def celery_worker_and_beat(env: dict, log_dir: Path, *, concurrency: int = 2,
                           loglevel: str = "warning",
                           name: str = "celery") -> tuple[Process, Process]:
    """A Celery worker (node ``name@host``, given last on its command line) and beat on
    ``env``'s broker, logging to ``log_dir``; stop beat first."""
    celery = [sys.executable, "-m", "celery", "-A", "controlplane"]
    worker = Process([*celery, "worker", "--concurrency", str(concurrency), "--loglevel",
                      loglevel, "-n", f"{name}@%h"], env=env, log=log_dir / "worker.log")
    beat = Process([*celery, "beat", "--loglevel", loglevel, "--schedule",
                    str(log_dir / "beat-schedule")], env=env, log=log_dir / "beat.log")
    return worker, beat


def sim_agent(server_port: int, token_file: Path, hostname: str, spool: Path, *, gpus: int,
              interval: float, extra: tuple[str, ...] = (), log: Path | None = None
              ) -> Process:
    """The real agent, with simulated GPUs, streaming to the server on ``server_port``;
    ``extra``: more flags (``--supervise``, ``--vllm-metrics-url URL``)."""
    return Process([sys.executable, "-m", "agents", "run", "--server",
                    f"http://127.0.0.1:{server_port}", "--token-file", str(token_file),
                    "--hostname", hostname, "--gpu-backend", "sim", "--sim-gpus", str(gpus),
                    *extra, "--interval", str(interval), "--spool-dir", str(spool)], log=log)


def start_server(port: int, log: Path, env: dict[str, str] | None = None) -> Process:
    """uvicorn with the production ASGI app on the test database (``env``: server_env() or
    a variant of it), once it answers /healthz."""
    server = Process([sys.executable, "-m", "uvicorn", "controlplane.asgi:application",
                      "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                     env=env or server_env(), log=log)
    wait_until(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), 60,
               lambda: f"server did not start:\n{server.output()}")
    return server


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


class RedisServer:
    """A private redis-server on a free port that a test may stop and start again."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise AssertionError("redis-server is missing: apt-get install redis-server")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._answers, 20, lambda: f"redis-server on {self.port} did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        except redis.RedisError:
            return False


class HookReceiver:
    """A webhook receiver on loopback: records every POST (arrival time, headers, raw body) and
    answers 200. ``start()`` returns it; ``url`` is where to point a channel."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        self._server = None

    def start(self) -> HookReceiver:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 -- http.server's naming
                arrived = time.time()
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                posts.append({"at": arrived, "path": self.path, "headers": self.headers,
                              "body": body})
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/hook"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
