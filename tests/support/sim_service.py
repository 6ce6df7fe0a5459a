"""A service on simulated replicas behind a real vllm-router, every process real, and a stall.

The stack: the control plane's ASGI server; an agent with simulated GPUs supervising the
service's simulated vLLM replicas (``--supervise``); an agent with ``--router`` on a host of
its own, running the real vllm-router (the PyPI wheel's binary) and changing its worker list
live; the service controller's tick on a thread of this process, as beat runs it. The service
is created through the HTTP API. ``stall`` wedges one replica's engine loop (the simulated
vLLM's ``POST /sim/stall``) under the clients' load and follows it out of the router and, once
resumed, back in. tests/e2e/test_service_stall.py asserts on it; tests/bench/service_stall.py
measures it. With ``hosts=2`` the replicas spread over two GPU hosts, and ``lose_host`` kills
one of them whole (its agent and its replicas, SIGKILL) for healing to replace what it held:
tests/e2e/test_service_replica_loss.py. ``add_service`` puts another service beside the first,
behind a vllm-router of its own on the same router host (tests/bench/autoscaling_ramp.py runs
autoscaled services and a fixed one side by side).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from controlplane.fleet import tasks
from controlplane.fleet.models import Deployment, Host, Service, ServiceEvent, ServiceEventKind
from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from tests.support.live import Process, free_port, sim_agent, start_server
from tests.support.polling import wait_until
from tests.support.roles import user_with_role
from tests.support.service_load import ServiceLoad

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ROUTER = Path(sys.executable).parent / "vllm-router"
GPU_HOST, ROUTER_HOST = "stall-gpu", "stall-router"
# The replicas serve only the clients' requests (no synthetic load of their own) and start
# at once: the stack is up in seconds.
REPLICA_ENV = {"PITWALL_SIM_LOAD": "0", "PITWALL_SIM_STARTUP_S": "0"}
# Answered in about half a second by a simulated H100: each replica holds requests at nearly
# every moment, which is what a stall verdict needs to see (an idle engine that wedges holds
# nothing, shows nothing and keeps nobody waiting).
CLIENTS, MAX_TOKENS, PAUSE_S = 6, 64, 0.05
WORKERS_POLL_S = 0.1
# Deadlines only: each turns a hang into a failure that says what the stack was doing.
START_S, TURN_S = 120, 120
# Requests the other replicas answer while the stalled one is out, before it is resumed.
SERVED_WHILE_OUT = 2 * CLIENTS
# Stalling an idle replica shows nothing: it is resumed and stalled again, this many times.
IDLE_TRIES = 20
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(method: str, url: str, body: dict | None = None, token: str = "") -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    with NO_PROXY.open(request, timeout=30) as reply:
        text = reply.read()
    return json.loads(text) if text.strip() else None


class Controller:
    """The service controller's tick on a thread, as beat would run it; errors are kept."""

    def __init__(self, tick_s: float) -> None:
        self.tick_s = tick_s
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="service-controller",
                                         daemon=True)

    def start(self) -> Controller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.tick_s):
                try:
                    tasks.service_controller()
                except Exception as exc:  # noqa: BLE001 -- kept, and failed on by the caller
                    self.errors.append(repr(exc))
        finally:
            connection.close()


@dataclass
class Stall:
    """One replica's stall, as the clients, Pitwall and the router saw it (unix seconds)."""

    replica: int
    url: str
    stalled_at: float
    held_at_stall: dict  # what the simulated engines held when they froze
    verdict_at: float  # the OUT_OF_ROTATION event's time: the controller's verdict
    event: dict  # its message and data (why, held, running, waiting)
    unlisted_at: float  # the router's GET /workers no longer lists it
    resumed_at: float
    relisted_at: float  # listed again after the resume
    failed_after_unlisted: list[str]  # errors of requests sent after the router dropped it
    failed_while_stalled: int  # client errors from the stall to the resume

    def figures(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "stall_to_verdict_s": round(self.verdict_at - self.stalled_at, 2),
            "verdict_to_router_s": round(self.unlisted_at - self.verdict_at, 2),
            "stall_to_out_of_router_s": round(self.unlisted_at - self.stalled_at, 2),
            "resume_to_router_s": round(self.relisted_at - self.resumed_at, 2),
            "held_requests": self.event.get("held"),
            "held_running": self.event.get("running"),
            "held_waiting": self.event.get("waiting"),
            "client_errors_while_stalled": self.failed_while_stalled}


class SimServiceStack:
    """The processes of the module docstring; ``start`` brings them up, ``stop`` ends them."""

    def __init__(self, workdir: Path, server_env: dict[str, str], *, replicas: int = 3,
                 hosts: int = 1, tick_s: float | None = None, interval_s: float = 1.0,
                 gpus_per_host: int | None = None) -> None:
        self.workdir, self.server_env, self.replicas = workdir, server_env, replicas
        # Each GPU host has a GPU per replica unless told otherwise: any one of them can take
        # the whole service.
        self.gpus_per_host = gpus_per_host or replicas
        self.gpu_hosts = [GPU_HOST, *(f"{GPU_HOST}-{n}" for n in range(2, hosts + 1))]
        self.gpu_agents: dict[str, Process] = {}
        self.tick_s = tick_s if tick_s is not None else settings.PITWALL["SERVICE_TICK_S"]
        self.interval_s = interval_s
        self.port, self.router_port = free_port(), free_port()
        self.processes: list[Process] = []
        self.controller: Controller | None = None
        self.load: ServiceLoad | None = None
        self.service: Service | None = None
        self.api_token = ""

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SimServiceStack:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.api_token = self._deployer_token()
        self.processes.append(start_server(self.port, self.workdir / "server.log",
                                           self.server_env))
        low = free_port()  # the replicas' ports: each host's port range from a free one on
        for n, hostname in enumerate(self.gpu_hosts):  # disjoint: the hosts share 127.0.0.1
            self.gpu_agents[hostname] = self._gpu_agent(hostname, low + 20 * n)
            self.processes.append(self.gpu_agents[hostname])
        self.processes.append(self._router_agent())
        self.controller = Controller(self.tick_s).start()
        return self

    def stop(self) -> None:
        if self.load is not None:
            self.load.stop(timeout=0)  # no new requests; one held by a stalled replica
        if self.controller is not None:  # ends when its agent stops it (a 500)
            self.controller.stop()
        for process in reversed(self.processes):  # the agents first, the server last
            process.stop(timeout=60)
        if self.load is not None:
            self.load.stop(timeout=60)

    def _deployer_token(self) -> str:
        if not get_user_model().objects.filter(username="stall-lead").exists():
            user_with_role("stall-lead", "deployer")
        return issue_api_token("stall-lead")

    def _token_file(self, hostname: str) -> Path:
        path = self.workdir / f"{hostname}.token"
        path.write_text(issue_agent_token(hostname)[0])
        return path

    def _gpu_agent(self, hostname: str, low: int) -> Process:
        name = "gpu" if hostname == GPU_HOST else hostname  # the one-host stack's names
        return sim_agent(self.port, self._token_file(hostname), hostname,
                         self.workdir / f"{name}-spool", gpus=self.gpus_per_host,
                         interval=self.interval_s,
                         extra=("--supervise", "--port-range", f"{low}-{low + 19}",
                                "--advertise-address", "127.0.0.1"),
                         log=self.workdir / f"{name}-agent.log")

    def _router_agent(self) -> Process:
        return Process([sys.executable, "-m", "agents", "run", "--server", self.base,
                        "--token-file", str(self._token_file(ROUTER_HOST)),
                        "--hostname", ROUTER_HOST, "--gpu-backend", "none", "--router",
                        "--router-command", str(ROUTER), "--interval", str(self.interval_s),
                        "--spool-dir", str(self.workdir / "router-spool")],
                       log=self.workdir / "router-agent.log")

    # -- the service ----------------------------------------------------------------------

    def create_service(self, name: str = "stall", **fields: Any) -> Service:
        """Through the HTTP API, once both agents have reported; then wait until every
        replica is ready and listed by the router. ``fields``: more of the service's fields,
        or other values of these."""
        self.service = self._post_service(name, self.router_port,
                                          {"replicas": self.replicas, **fields})
        wait_until(self.serving, START_S, self.explain, every=0.5)
        return self.service

    def add_service(self, name: str, replicas: int, **fields: Any) -> tuple[Service, int]:
        """Another service beside the first, of ``replicas`` replicas behind a vllm-router of
        its own on the same router host (its agent runs one per service): the service and its
        router's port, once every replica is ready and listed there."""
        port = free_port()
        service = self._post_service(name, port, {"replicas": replicas, **fields})
        wait_until(lambda: self._serving(service, replicas, port), START_S, self.explain,
                   every=0.5)
        return service, port

    def _post_service(self, name: str, router_port: int, fields: dict[str, Any]) -> Service:
        """Through the HTTP API, once both agents have reported."""
        router = wait_until(lambda: Host.objects.filter(
            hostname=ROUTER_HOST, inventory__roles__contains=["router"]).first(), START_S,
            self.explain)
        wait_until(lambda: Host.objects.filter(hostname__in=self.gpu_hosts, gpus__isnull=False)
                   .distinct().count() == len(self.gpu_hosts), START_S, self.explain)
        made = call("POST", f"{self.base}/api/v1/services/", {
            "name": name, "model": MODEL, "vllm_version": "0.33.0",
            "args": {"max_num_seqs": 64}, "env": REPLICA_ENV, "router_host": router.pk,
            "router_port": router_port, "drain_timeout_s": 5,
            "reason": "a stall, end to end", **fields}, token=self.api_token)
        return Service.objects.get(pk=made["id"])

    def serving(self) -> bool:
        """Every replica ready, in rotation and listed by the router."""
        return self._serving(self.service, self.replicas, self.router_port)

    def _serving(self, service: Service | None, replicas: int, router_port: int) -> bool:
        listed = self.router_workers(router_port)
        urls = [self.url(d) for d in self.replica_rows(service)
                if d.state == "ready" and d.in_rotation]
        return len(urls) == replicas and sorted(urls) == sorted(listed or [])

    def replica_rows(self, service: Service | None = None) -> list[Deployment]:
        """The replicas of ``service``, the first service by default."""
        return list(Deployment.objects.filter(service=service or self.service)
                    .select_related("host").order_by("replica"))

    def url(self, d: Deployment) -> str:
        return f"http://127.0.0.1:{d.port}"

    def router_workers(self, port: int | None = None) -> list[str] | None:
        """What the router's GET /workers lists (the first service's router by default);
        None while it does not answer."""
        try:
            answer = call("GET", f"http://127.0.0.1:{port or self.router_port}/workers")
        except OSError:
            return None
        return [w["url"] if isinstance(w, dict) else w for w in answer.get("workers", [])]

    def start_load(self, clients: int = CLIENTS) -> ServiceLoad:
        self.load = ServiceLoad(f"http://127.0.0.1:{self.router_port}", MODEL,
                                clients=clients, max_tokens=MAX_TOKENS, pause_s=PAUSE_S,
                                stream=False).start()
        return self.load

    def wait_until_each_replica_answered(self) -> None:
        """Steady load: every replica has finished requests of the router's clients."""
        def answered(d: Deployment) -> bool:
            text = NO_PROXY.open(f"{self.url(d)}/metrics", timeout=30).read().decode()
            return any(s.value > 0 for f in text_string_to_metric_families(text)
                       for s in f.samples if s.name == "vllm:request_success_total")
        wait_until(lambda: all(answered(d) for d in self.replica_rows()), TURN_S,
                   self.explain, every=0.5)

    # -- a host lost ----------------------------------------------------------------------------

    def lose_host(self, hostname: str) -> float:
        """The host is gone: its agent and every process the agent started (the replicas'
        simulated vLLMs, each in a session of its own) are killed with SIGKILL, so nothing
        answers or reports from it again. When (unix seconds)."""
        agent = self.gpu_agents[hostname].proc
        os.kill(agent.pid, signal.SIGSTOP)  # it starts nothing more while its tree is read
        tree = psutil.Process(agent.pid).children(recursive=True)
        lost_at = time.time()
        agent.kill()
        agent.wait()
        for child in tree:
            with contextlib.suppress(psutil.NoSuchProcess):  # it ended with its agent
                child.kill()
        psutil.wait_procs(tree, timeout=30)
        return lost_at

    # -- a stall ----------------------------------------------------------------------------

    def stall(self, replica: int) -> Stall:
        """Wedge the replica's engines under load; follow it out of the router (GET /workers
        every 0.1 s), keep it stalled while the others answer SERVED_WHILE_OUT requests sent
        after, resume it and follow it back in. The replica must be serving beforehand."""
        assert self.load is not None and self.service is not None
        victim = next(d for d in self.replica_rows() if d.replica == replica)
        url = self.url(victim)
        stalled_at, held = self._stall_holding(url)
        unlisted_at = self.poll_workers(lambda listed: url not in listed, "left the router")
        event = wait_until(lambda: ServiceEvent.objects.filter(
            service=self.service, deployment=victim, kind=ServiceEventKind.OUT_OF_ROTATION,
            at__gte=datetime.fromtimestamp(stalled_at, UTC)).first(), TURN_S, self.explain)
        load = self.load
        wait_until(lambda: len(load.between(unlisted_at, time.time())) >= SERVED_WHILE_OUT,
                   TURN_S, self.explain)
        resumed_at = time.time()
        call("POST", f"{url}/sim/resume")
        relisted_at = self.poll_workers(lambda listed: url in listed, "came back")
        wait_until(self.serving, TURN_S, self.explain, every=0.5)
        failed = self.load.failed(unlisted_at)
        return Stall(replica, url, stalled_at, held, event.at.timestamp(),
                     {"message": event.message, **event.data}, unlisted_at, resumed_at,
                     relisted_at, [f.error for f in failed],
                     len(self.load.failed(stalled_at, resumed_at)))

    def _stall_holding(self, url: str) -> tuple[float, dict]:
        """Stall the replica at a moment it holds requests (an idle one is resumed and
        stalled again): when, and what it held."""
        for _ in range(IDLE_TRIES):
            stalled_at = time.time()
            held = call("POST", f"{url}/sim/stall")
            if held["requests_running"] + held["requests_waiting"] > 0:
                return stalled_at, held
            call("POST", f"{url}/sim/resume")
            wait_until(lambda: call("GET", f"{url}/sim/state")["requests_running"], TURN_S,
                       self.explain, every=0.02)
        raise AssertionError(f"{url} held no request at any of {IDLE_TRIES} stalls")

    def poll_workers(self, done, what: str) -> float:
        def check() -> float | None:
            listed = self.router_workers()
            return time.time() if listed is not None and done(listed) else None
        return wait_until(check, TURN_S, lambda: f"the replica never {what}\n"
                          + self.explain(), every=WORKERS_POLL_S)

    def explain(self) -> str:
        """What the stack was doing: for a failure's message."""
        rows = [(d.replica, d.host.hostname, d.state, d.in_rotation, d.rotation_note, d.port)
                for d in self.replica_rows()] if self.service else []
        events = list(ServiceEvent.objects.filter(service=self.service).values_list(
            "kind", "message")[:10]) if self.service else []
        logs = "\n".join(f"--- {p.log.name}\n{p.output()[-2500:]}" for p in self.processes
                         if p.log is not None)
        errors = self.controller.errors[-5:] if self.controller else []
        return (f"replicas: {rows}\nrouter lists: {self.router_workers()}\nevents: {events}\n"
                f"controller errors: {errors}\n{logs}")
