"""Shared pieces of the benchmarks: a bench database, a server process, CPU accounting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

from tests.support.polling import wait_until

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
            "warning", "--no-access-log", "--loop", "uvloop", "--http", "httptools",
            "--timeout-keep-alive", "15"]  # as runstack: longer than an agent's 5-s hold
    proc = subprocess.Popen(argv, cwd=ROOT, env=env)
    try:
        wait_for_url(f"http://127.0.0.1:{port}/healthz", proc)
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


# PostgreSQL's own processes that work for every database (the WAL and its flushes to disk).
SHARED_BACKENDS = ("walwriter", "checkpointer", "background writer", "autovacuum launcher")


def postgres_processes_of(dbname: str = "", shared: bool = True,
                          application: str = "") -> list[psutil.Process]:
    """The PostgreSQL processes working for ``dbname`` (the bench database by default) and,
    with ``shared``, the shared ones: other sessions' databases on the same server are left
    out of the count. ``application``: only the sessions of that ``application_name`` (a
    process started with ``PGAPPNAME``), their parallel workers included."""
    import psycopg

    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres",
                         autocommit=True) as conn:
        pids = [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE (datname = %s AND pid <> pg_backend_pid()"
            " AND (%s = '' OR application_name = %s)) OR backend_type = ANY(%s)",
            (dbname or BENCH_DB, application, application,
             list(SHARED_BACKENDS) if shared else []))]
    found = []
    for pid in pids:
        with suppress(psutil.Error):
            found.append(psutil.Process(pid))
    return found


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


# -- added for the agent and replay benchmarks ----------------------------------------------

def use_bench_database(env: dict) -> None:
    """Point this process's Django at the bench database (call before django.setup())."""
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE",
                                            "SECRET_KEY", "SECURE_SSL_REDIRECT")})


def open_bench_database(reuse: bool = False) -> dict[str, str]:
    """Warn about other benchmarks running, recreate the bench database (unless ``reuse``),
    point this process's Django at it and set Django up; returns the server environment."""
    others = bench_running_elsewhere()
    if others:
        print("other benchmarks are running; their load would skew this one:", *others,
              sep="\n  ")
    env = bench_env()
    if not reuse:
        fresh_database(env)
    use_bench_database(env)
    import django

    django.setup()
    return env


def create_agent_token(hostname: str) -> str:
    """A host row and an agent token for it, through the ORM; returns the token."""
    import django

    django.setup()
    from django.db import connections

    connections.close_all()  # fresh_database() dropped the database under an open one
    from controlplane.fleet.models import AgentToken, Host
    from controlplane.lib import tokens

    host = Host.objects.create(hostname=hostname)
    token, lookup, digest = tokens.new_token(tokens.AGENT)
    AgentToken.objects.create(host=host, lookup=lookup, digest=digest)
    return token


def count_samples(entity: str = "gpu") -> int:
    """Rows stored in one sample table (an entity of controlplane.telemetry.schema.TABLES)."""
    from django.db import connection

    from controlplane.telemetry.schema import TABLES

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {TABLES[entity].name}")
        return cursor.fetchone()[0]


def wait_for_url(url: str, proc: subprocess.Popen | None = None, timeout: float = 60) -> None:
    """Poll until ``url`` answers 2xx (a child server started); raises if it never does or
    the child exits first."""

    def answers() -> bool:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return True
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"{url} did not answer: the process exited") from None
            return False

    wait_until(answers, timeout, lambda: f"{url} did not answer", every=0.3)


def stop_process(proc: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL if it lingers: only the process we started."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


def bench_running_elsewhere() -> list[str]:
    """Other benchmark processes on this machine (their load would skew ours)."""
    me = {os.getpid(), os.getppid()}
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or ())
        if p.info["pid"] not in me and "tests.bench." in cmd and "-m" in cmd:
            found.append(f"{p.info['pid']}: {cmd[:120]}")
    return found


def profile_start(pid: int, out: Path, seconds: float = 600) -> subprocess.Popen | None:
    """py-spy (installed in the venv) sampling ``pid`` into raw folded stacks, until
    ``profile_stop`` or ``seconds``. Only active threads are sampled (py-spy's default)."""
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        return None
    return subprocess.Popen([str(spy), "record", "-p", str(pid), "-d", str(max(1, int(seconds))),
                             "-f", "raw", "-o", str(out), "--nonblocking", "-r", "200"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def profile_stop(spy: subprocess.Popen | None) -> None:
    """Ctrl-C makes py-spy write what it sampled so far."""
    if spy is not None and spy.poll() is None:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(10)


def fold_profile(paths: list[Path], top: int = 15) -> dict:
    """Aggregate py-spy raw stacks into shares of the busy samples, two ways.

    Each line of a raw file is ``frame;frame;...;leaf count``, root first, a frame being
    ``func (path:line)``. ``self``: the leaf function (a library's, often). ``by_project_code``:
    the deepest frame of our own code (controlplane/, agents/, tests/) in the stack, i.e. the
    project function that was running or had called the library that was; ``by_project_file``
    sums those by module. Native code (orjson, zlib) shows as its Python caller. A stack whose leaf
    waits (epoll, select, a lock, sleep) is idle and left out of both.
    """
    idle_words = ("select (", "epoll", "poll (", "wait (", "acquire", "sleep", "accept (",
                  "recv_into", "readinto")
    total = idle = 0
    own: dict[str, int] = {}
    project: dict[str, int] = {}
    files: dict[str, int] = {}
    lines = [line for path in paths if path.exists() for line in path.read_text().splitlines()]
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        if any(w in frames[-1] for w in idle_words):
            idle += n
            continue
        leaf = _short_frame(frames[-1])
        own[leaf] = own.get(leaf, 0) + n
        ours = [f for f in frames if _is_project(f)]
        key = _short_frame(ours[-1]) if ours else f"(outside the project) {leaf}"
        project[key] = project.get(key, 0) + n
        where = _frame_file(ours[-1]) if ours else "(outside the project)"
        files[where] = files.get(where, 0) + n
    busy = max(1, total - idle)

    def ranked(counts: dict[str, int]) -> list[list]:
        best = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return [[name, round(100 * n / busy, 1)] for name, n in best]

    return {"samples": total, "busy_pct_of_samples": round(100 * (total - idle) / max(1, total), 1),
            "by_project_file_pct_of_busy": ranked(files),
            "by_project_code_pct_of_busy": ranked(project), "self_pct_of_busy": ranked(own)}


def _is_project(frame: str) -> bool:
    where = frame.partition(" (")[2]
    return ".venv" not in where and any(f"/{top}/" in where or where.startswith(f"{top}/")
                                        for top in ("controlplane", "agents", "tests"))


def _frame_file(frame: str) -> str:
    where = frame.partition(" (")[2].split(":")[0]
    parts = Path(where).parts
    return "/".join(parts[-2:]) if len(parts) >= 2 else where


def _short_frame(frame: str) -> str:
    # "func (path/to/module.py:123)" -> "func (module.py)": lines would split one function.
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.split(':')[0]).name})" if where else name
