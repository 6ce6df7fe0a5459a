"""The fault suite's real parts: a private PostgreSQL and the control plane's processes, a fleet
of simulated agents, the accounting of what was sent against what was stored, and the figures
each case records for RELIABILITY.md.

Nothing here touches the machine's shared PostgreSQL or Redis: the suite starts its own (initdb
into a temporary directory on a free port, a private redis-server) and stops them by pid.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil
import psycopg

from tests.support.live import ROOT, free_port
from tests.support.polling import wait_until

T = TypeVar("T")
PG_BIN = Path("/usr/lib/postgresql/15/bin")
# SIGINT is PostgreSQL's fast shutdown (sessions ended, a checkpoint written), SIGQUIT its
# immediate one (no checkpoint: the next start replays the WAL, as after a crash).
SHUTDOWN_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT,
                    "immediate": signal.SIGQUIT}
RESULTS = Path(os.environ.get("PITWALL_FAULT_RESULTS", ROOT / "var" / "faults" / "results.json"))
FLEET_SIZE = int(os.environ.get("PITWALL_FAULT_AGENTS", "20"))


class PrivatePostgres:
    """A PostgreSQL cluster of the suite's own, run as the ``postgres`` user when the suite
    runs as root (the server refuses root), trusting local connections."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pitwall-faults-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user:
            shutil.chown(self.root, self._user)
        self.log = self.root / "postgres.log"

    def _binary(self, name: str) -> str:
        path = PG_BIN / name
        found = str(path) if path.exists() else shutil.which(name)
        if found is None:
            raise AssertionError(f"{name} is missing: apt-get install postgresql")
        return found

    def init(self) -> PrivatePostgres:
        subprocess.run([self._binary("initdb"), "-D", str(self.data), "-A", "trust",
                        "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale", "C.UTF-8"],
                       check=True, user=self._user, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
        return self

    def start(self) -> None:
        """Start (again) on the same port and data directory; returns once it answers."""
        log = open(self.log, "ab")  # noqa: SIM115 - the server writes it while it runs
        self.proc = subprocess.Popen(
            [self._binary("postgres"), "-D", str(self.data), "-p", str(self.port),
             "-k", str(self.root), "-c", "listen_addresses=127.0.0.1",
             "-c", "max_connections=200"],
            user=self._user, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_until(self.answers, 60, lambda: f"postgres did not start:\n{self.tail()}")

    def stop(self, mode: str = "fast") -> None:
        """Shut down with ``mode`` (smart, fast, immediate), by signal to the postmaster."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(SHUTDOWN_SIGNALS[mode])
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def restart(self, mode: str) -> float:
        """Stop in ``mode`` and start again; the seconds it did not answer."""
        began = time.monotonic()
        self.stop(mode)
        self.start()
        return time.monotonic() - began

    def pids(self) -> list[int]:
        if self.proc is None or self.proc.poll() is not None:
            return []
        main = psutil.Process(self.proc.pid)
        return [main.pid, *(child.pid for child in main.children(recursive=True))]

    def stall(self) -> None:
        """Freeze every process of the cluster (SIGSTOP): connections stay open, nothing
        answers; the closest thing to a server stuck on a dead disk."""
        self._signal_all(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_all(signal.SIGCONT)

    def _signal_all(self, sig: int) -> None:
        # A backend may end between the listing and its signal (a client that just closed
        # its connection): it needs no signal any more.
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue

    def answers(self) -> bool:
        try:
            with psycopg.connect(self.url("postgres"), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def tail(self, size: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-size:] if self.log.exists() else ""

    def destroy(self) -> None:
        self.resume()  # a stalled cluster would not hear the shutdown
        self.stop("fast")
        shutil.rmtree(self.root, ignore_errors=True)


def database_url() -> str:
    """The test database, as the stack's processes reach it (the private cluster)."""
    from django.db import connection

    db = connection.settings_dict
    return f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def retrying(fn: Callable[[], T], timeout: float = 120) -> T:
    """``fn()`` again until it stops failing on a connection error (a restarted database)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (psycopg.OperationalError, psycopg.InterfaceError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def query(sql: str, params: tuple | list = ()) -> list[tuple]:
    """One statement on a connection of its own (so it survives restarts), retried while the
    database does not answer."""

    def run() -> list[tuple]:
        with psycopg.connect(database_url(), connect_timeout=5, autocommit=True) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    return retrying(run)


class Service:
    """One process of the stack in a session of its own, so that a kill reaches its children
    too (Celery's pool, uvicorn's workers), as systemd's control group would."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def send(self, sig: int) -> None:
        if self.running():
            os.killpg(self.proc.pid, sig)  # type: ignore[union-attr]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.send(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            self.wait()

    def wait(self, timeout: float = 30) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.send(signal.SIGKILL)
            self.proc.wait()
        # Orphans of a killed leader (a pool process) are still in its session: end them.
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getsid(proc.pid) == self.proc.pid:
                    proc.kill()
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def rss_bytes(self) -> int:
        """Resident memory of the process and its children."""
        if not self.running():
            return 0
        main = psutil.Process(self.proc.pid)  # type: ignore[union-attr]
        total = 0
        for proc in [main, *main.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        return total

    def output(self, size: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-size:] if self.log.exists() else ""


class Stack:
    """The control plane as production runs it: uvicorn (ingest, pages, API, WebSockets), a
    Celery worker and Celery beat, on the private PostgreSQL and a private Redis."""

    def __init__(self, workdir: Path, redis_url: str) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": redis_url,
                    "CELERY_BROKER_URL": redis_url, "DJANGO_SETTINGS_MODULE": "tests.settings",
                    "LOG_LEVEL": "WARNING", "PITWALL_ALERT_ALLOW_PRIVATE_WEBHOOKS": "true",
                    "PYTHONUNBUFFERED": "1"}
        self.services: dict[str, Service] = {}

    def configure(self, **env: str) -> None:
        """Environment for the processes started from now on (settings: PITWALL_…)."""
        self.env.update(env)

    def _service(self, name: str, argv: list[str]) -> Service:
        service = Service(name, argv, dict(self.env), self.workdir / f"{name}.log")
        self.services[name] = service
        service.start()
        return service

    def start(self) -> None:
        self.start_web()
        self.start_worker()
        self.start_beat()

    def start_web(self) -> Service:
        service = self._service("web", [
            sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host",
            "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
            "--no-access-log"])
        wait_until(lambda: self.answers() or not service.running(), 90,
                   lambda: f"web did not start:\n{service.output()}")
        assert service.running(), f"web exited:\n{service.output()}"
        return service

    def start_worker(self, concurrency: int = 2) -> Service:
        return self._service("worker", [
            sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--loglevel",
            "info", "--concurrency", str(concurrency), "--without-gossip", "--without-mingle"])

    def start_beat(self) -> Service:
        return self._service("beat", [
            sys.executable, "-m", "celery", "-A", "controlplane", "beat", "--loglevel", "info",
            "--schedule", str(self.workdir / "celerybeat-schedule")])

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.services[name].kill(sig)

    def restart(self, name: str) -> Service:
        service = self.services[name]
        service.stop()
        starter = {"web": self.start_web, "worker": self.start_worker,
                   "beat": self.start_beat}[name]
        return starter()

    def rss_bytes(self, name: str) -> int:
        return self.services[name].rss_bytes()

    def log(self, name: str) -> str:
        return self.services[name].output(100_000)

    def answers(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        for service in reversed(list(self.services.values())):
            service.stop()


STOP_LINE = re.compile(
    r"stopped: boot (?P<boot>\S+) made (?P<made>\d+) batches .*?; (?P<delivered>\d+) "
    r"delivered, (?P<dropped>\d+) dropped, (?P<evicted>\d+) evicted and not yet reported; "
    r"(?P<waiting>\d+) batches wait in the spool")


@dataclass
class Run:
    """One start of one agent, as its stop line tells it (None: killed, no line)."""

    log: Path
    boot: str | None = None
    made: int = 0
    dropped: int = 0
    evicted: int = 0
    waiting: int = 0

    def read_stop_line(self) -> bool:
        match = STOP_LINE.search(self.log.read_text(errors="replace"))
        if match is None:
            return False
        self.boot = match["boot"]
        self.made, self.dropped = int(match["made"]), int(match["dropped"])
        self.evicted, self.waiting = int(match["evicted"]), int(match["waiting"])
        return True


class Agent:
    """The real agent (``python -m agents run``) with simulated GPUs, one host of the fleet."""

    def __init__(self, workdir: Path, hostname: str, server_url: str, token: str, *,
                 interval: float = 1.0, gpus: int = 1, prefix: tuple[str, ...] = (),
                 spool_dir: Path | None = None) -> None:
        self.workdir, self.hostname, self.server_url = workdir, hostname, server_url
        self.interval, self.gpus, self.prefix = interval, gpus, prefix
        self.token_file = workdir / f"{hostname}.token"
        self.token_file.write_text(token)
        self.spool_dir = spool_dir or workdir / f"{hostname}.spool"
        self.runs: list[Run] = []
        self.service: Service | None = None

    def argv(self) -> list[str]:
        return [*self.prefix, sys.executable, "-m", "agents", "run", "--server",
                self.server_url, "--token-file", str(self.token_file), "--hostname",
                self.hostname, "--gpu-backend", "sim", "--sim-gpus", str(self.gpus),
                "--interval", str(self.interval), "--spool-dir", str(self.spool_dir),
                "--log-level", "info"]

    def start(self) -> None:
        log = self.workdir / f"{self.hostname}.run{len(self.runs) + 1}.log"
        self.runs.append(Run(log))
        self.service = Service(self.hostname, self.argv(), {**os.environ, "PYTHONUNBUFFERED": "1"},
                               log)
        self.service.start()

    def running(self) -> bool:
        return self.service is not None and self.service.running()

    def stop(self) -> None:
        """SIGTERM: the agent spools what it holds in memory and prints its stop line."""
        if self.service is not None:
            self.service.stop()
            self.runs[-1].read_stop_line()

    def kill(self) -> None:
        if self.service is not None:
            self.service.kill(signal.SIGKILL)

    def spooled(self) -> int:
        if not self.spool_dir.exists():
            return 0
        return sum(1 for p in self.spool_dir.iterdir() if p.name.endswith(".json.gz"))

    def output(self) -> str:
        return "\n".join(run.log.read_text(errors="replace")[-1500:] for run in self.runs
                         if run.log.exists())


@dataclass
class Account:
    """What the fleet sent against what the database holds, in samples (one per batch)."""

    expected: int  # batches the agents made (clean stops: their stop lines; killed runs: up
    # to the highest seq the server stored of them)
    stored: int  # host rows in the database
    distinct: int  # distinct (host, ts) among them
    waiting: int  # still in the spools after the agents stopped: not sent yet, not lost
    dropped: int  # refused for good and counted by the agents
    evicted: int  # evicted from full spools: counted by the agents and reported to the server
    killed_runs: int  # runs ended by SIGKILL (their last batches cannot be known)
    per_host: dict[str, tuple[int, int]] = field(default_factory=dict)  # host: (expected, stored)

    @property
    def lost(self) -> int:
        return max(0, self.expected - self.stored - self.waiting)

    @property
    def duplicated(self) -> int:
        # The primary key keeps a sample once; anything above what was made is a duplicate
        # under another stream (a replay stored twice).
        return (self.stored - self.distinct) + max(0, self.stored + self.waiting - self.expected)

    @property
    def counted(self) -> int:
        """The loss the agents counted and reported (dropped, evicted)."""
        return self.dropped + self.evicted

    def hosts_short(self) -> list[str]:
        return [f"{h}: expected {e}, stored {s}" for h, (e, s) in self.per_host.items() if e != s]


class Fleet:
    """``size`` simulated agents at 1 Hz, each a host with its own token and spool."""

    def __init__(self, workdir: Path, server_url: str, size: int = FLEET_SIZE,
                 interval: float = 1.0, prefix: str = "fault-host") -> None:
        from controlplane.fleet.tokens import issue_agent_token

        self.workdir = workdir
        self.agents = [Agent(workdir, f"{prefix}-{i:02d}", server_url,
                             issue_agent_token(f"{prefix}-{i:02d}")[0], interval=interval)
                       for i in range(size)]

    def start(self) -> None:
        for agent in self.agents:
            agent.start()

    def stop(self) -> None:
        for agent in self.agents:
            if agent.running():
                agent.service.send(signal.SIGTERM)  # type: ignore[union-attr]
        for agent in self.agents:
            agent.stop()

    def spooled(self) -> int:
        return sum(agent.spooled() for agent in self.agents)

    def wait_stored(self, samples: int, timeout: float = 120) -> None:
        """Until every host has at least ``samples`` samples stored."""
        names = [a.hostname for a in self.agents]
        wait_until(lambda: min(stored_per_host(names).values(), default=0) >= samples, timeout,
                   lambda: f"stored: {stored_per_host(names)}")

    def wait_drained(self, timeout: float = 600) -> float:
        """Until every spool is empty; the seconds it took."""
        began = time.monotonic()
        wait_until(lambda: self.spooled() == 0, timeout,
                   lambda: f"{self.spooled()} batches still spooled:\n"
                           f"{self.agents[0].output()[-2000:]}", every=0.5)
        return time.monotonic() - began

    def not_running(self) -> list[str]:
        """Agents not running (a crash, or a crash loop's pause), with their last words."""
        return [f"{a.hostname}:\n{a.output()[-600:]}" for a in self.agents if not a.running()]

    def crashed(self) -> list[str]:
        """Agents that exited on their own (a crash), with their last words."""
        return [f"{a.hostname}:\n{a.output()[-800:]}" for a in self.agents
                if a.service is not None and not a.running() and a.service.proc.returncode
                not in (0, -signal.SIGTERM, -signal.SIGKILL)]

    def account(self) -> Account:
        """After ``stop()``: the batches made against the samples stored, host by host."""
        stored = stored_per_host([a.hostname for a in self.agents])
        streams = streams_per_host([a.hostname for a in self.agents])
        distinct = query("SELECT count(DISTINCT (s.host_id, s.ts)) FROM telemetry_host_sample s"
                         " JOIN fleet_host h ON h.id = s.host_id"
                         " WHERE h.hostname = ANY(%s)", ([a.hostname for a in self.agents],))
        account = Account(0, 0, distinct[0][0], 0, 0, 0, 0)
        for agent in self.agents:
            clean = {run.boot: run for run in agent.runs if run.boot}
            expected = sum(run.made for run in clean.values())
            # A killed run left no stop line: it made at least what the server stored of it.
            for boot, max_seq in streams.get(agent.hostname, {}).items():
                if boot not in clean:
                    expected += max_seq
                    account.killed_runs += 1
            account.expected += expected
            account.stored += stored.get(agent.hostname, 0)
            account.dropped += sum(run.dropped for run in clean.values())
            # The spool and its eviction counts outlive a run: the last run's stop line holds
            # what is still waiting and what was evicted but not reported yet.
            last = agent.runs[-1] if agent.runs else None
            if last is not None and last.boot:
                account.waiting += last.waiting
                account.evicted += last.evicted
            account.per_host[agent.hostname] = (expected, stored.get(agent.hostname, 0))
        account.evicted += reported_evictions([a.hostname for a in self.agents])
        return account


@dataclass
class WebOutage:
    """The web process killed with SIGKILL and started again: what the fleet did meanwhile."""

    spooling_s: float  # from the kill until the fleet was seen spooling
    not_running: list[str]  # agents not running just before the restart, with their last words
    peak: int  # batches spooled at the restart
    down_s: float
    catch_up_s: float  # from the restart until every spool was empty


def web_down(stack: Stack, fleet: Fleet, seconds: float, spooling: Callable[[], bool],
             explain: Callable[[], str], *, within: float) -> WebOutage:
    """Kill the web process, keep it down ``seconds`` (and until ``spooling`` holds, which
    must happen ``within`` seconds of the kill), start it again, wait until the spools are
    empty and stop the fleet."""
    stack.kill("web", signal.SIGKILL)
    down_at = time.monotonic()
    wait_until(spooling, within, explain)
    spooling_s = time.monotonic() - down_at
    time.sleep(max(0.0, seconds - spooling_s))
    not_running, peak = fleet.not_running(), fleet.spooled()
    stack.start_web()
    down_s = time.monotonic() - down_at
    catch_up_s = fleet.wait_drained(600)
    fleet.stop()
    return WebOutage(spooling_s, not_running, peak, down_s, catch_up_s)


def stored_per_host(hostnames: list[str]) -> dict[str, int]:
    rows = query("SELECT h.hostname, count(*) FROM telemetry_host_sample s"
                 " JOIN fleet_host h ON h.id = s.host_id WHERE h.hostname = ANY(%s)"
                 " GROUP BY h.hostname", (hostnames,))
    return dict(rows)


def streams_per_host(hostnames: list[str]) -> dict[str, dict[str, int]]:
    rows = query("SELECT h.hostname, st.boot_id::text, st.max_seq FROM telemetry_agentstream st"
                 " JOIN fleet_host h ON h.id = st.host_id WHERE h.hostname = ANY(%s)",
                 (hostnames,))
    out: dict[str, dict[str, int]] = {}
    for hostname, boot, max_seq in rows:
        out.setdefault(hostname, {})[boot] = max_seq
    return out


def reported_evictions(hostnames: list[str]) -> int:
    """Samples the agents evicted from full spools and reported to the server."""
    rows = query("SELECT coalesce(sum(spool_evicted_samples), 0) FROM fleet_host"
                 " WHERE hostname = ANY(%s)", (hostnames,))
    return int(rows[0][0])


def record(case: str, *, injected: str, duration_s: float, unit: str, expected: int,
           stored: int, lost: int, duplicated: int, recovery_s: float | None,
           notes: str = "", **extra: Any) -> None:
    """One row of RELIABILITY.md's table (tests/faults/report.py renders it)."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    rows = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    rows = [r for r in rows if r["case"] != case]  # a rerun replaces its row
    rows.append({"case": case, "injected": injected, "duration_s": round(duration_s, 1),
                 "unit": unit, "expected": expected, "stored": stored, "lost": lost,
                 "duplicated": duplicated,
                 "recovery_s": None if recovery_s is None else round(recovery_s, 1),
                 "notes": notes, "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 **extra})
    RESULTS.write_text(json.dumps(rows, indent=2))


def record_account(case: str, account: Account, *, injected: str, duration_s: float,
                   recovery_s: float | None, notes: str = "", **extra: Any) -> None:
    """``record`` for a fleet's samples."""
    if account.waiting:
        # Stored falls short of expected by these without a loss: say so where it shows.
        notes += (f"{'; ' if notes else ''}{account.waiting} batch(es) made in the last second "
                  "waited in a spool at the stop (sent at the next start, not lost)")
    record(case, injected=injected, duration_s=duration_s, unit="samples",
           expected=account.expected, stored=account.stored, lost=account.lost,
           duplicated=account.duplicated, recovery_s=recovery_s, notes=notes,
           agents=len(account.per_host), account=asdict(account) | {"per_host": None},
           **extra)
