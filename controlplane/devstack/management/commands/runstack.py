import os
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from agents import vllm_args
from agents.children import Child, Stack, python
from agents.sim.fleet import BASE_PORT, host_name
from controlplane.devstack import service_demo
from controlplane.devstack.real_vllm_demo import NotInstalled, RealVllmDemo
from controlplane.fleet import deployments
from controlplane.fleet.models import AgentToken, Deployment, Gpu, Host
from controlplane.fleet.tokens import issue_agent_token
from controlplane.lib.selfmetrics import MULTIPROC_ENV, multiprocess_dir, prepare_directory

INVENTORY_WAIT_S = 60.0
# Longer than the 5 s an agent holds its samples between requests (PITWALL_AGENT_HOLD_S): with
# uvicorn's default of 5 s the server would close many kept-alive connections just as the next
# request comes (docs/configuration.md).
KEEP_ALIVE = ("--timeout-keep-alive", "15")
# The demo fleet's deployments: most are healthy; two are mis-tuned on purpose so the Tuning
# page has something to say after its first 10-minute window (docs/tuning.md). On 4 GPUs (the
# demo service takes the other half) the 70B model's weights are 35 GB a GPU: 0.6 of 80 GB
# leaves a small KV cache (0.35 left none: the engine refused to start).
DEMO_ARGS = {2: {"max_num_seqs": 8}, 3: {"gpu_memory_utilization": 0.6, "max_num_seqs": 256}}
DEMO_LOAD = {2: 12.0, 3: 12.0}


def server_children(opts: dict, var: Path) -> list[Child]:
    """The control plane's own processes: the ASGI server, the Celery worker and beat.

    They share one directory of metric files (emptied by ``handle`` before they start), so
    that ``/metrics`` sums every process's counts (prometheus_client's multiprocess mode,
    docs/prometheus.md)."""
    celery_log = ["--loglevel", opts["celery_loglevel"]]
    env = {MULTIPROC_ENV: str(metrics_dir(var))}
    return [
        Child("web", [python(), "-m", "uvicorn", "controlplane.asgi:application",
                      "--host", opts["host"], "--port", str(opts["port"]),
                      "--workers", str(opts["web_workers"]), "--log-level", "warning",
                      "--no-access-log", *KEEP_ALIVE], env),
        # Two slots at least: a slow notification receiver holds one (one attempt per channel
        # at a time, alerts/delivery/service.py), the alert cycle and other channels the other.
        Child("celery-worker", [python(), "-m", "celery", "-A", "controlplane", "worker",
                                *celery_log, "--concurrency", "2"], env),
        Child("celery-beat", [python(), "-m", "celery", "-A", "controlplane", "beat",
                              *celery_log, "--schedule", str(var / "celerybeat-schedule")], env),
    ]


def metrics_dir(var: Path) -> Path:
    return multiprocess_dir() or var / "metrics"


class Command(BaseCommand):
    help = "Run the web server, Celery worker and beat, and a simulated fleet; Ctrl-C stops all."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default=os.environ.get("PITWALL_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PITWALL_PORT", 8000)))
        parser.add_argument("--sim-hosts", type=int,
                            default=int(os.environ.get("PITWALL_SIM_HOSTS", 4)))
        parser.add_argument("--sim-gpus", type=int,
                            default=int(os.environ.get("PITWALL_SIM_GPUS", 8)))
        parser.add_argument("--web-workers", type=int,
                            default=int(os.environ.get("PITWALL_WEB_WORKERS", 1)))
        parser.add_argument("--celery-loglevel",
                            default=os.environ.get("PITWALL_CELERY_LOGLEVEL", "warning"),
                            choices=["debug", "info", "warning", "error"],
                            help="info: the worker logs each task's run time (the stack-cost "
                                 "benchmark reads the alert cycle's)")
        parser.add_argument("--real-vllm", action="store_true",
                            default=os.environ.get("PITWALL_REAL_VLLM") == "1",
                            help="also run a host whose agent serves the tiny model with the "
                                 "real vLLM (make real-vllm installs it)")

    def handle(self, **opts) -> None:
        var = Path(settings.BASE_DIR) / "var"
        var.mkdir(exist_ok=True)  # celery beat keeps its schedule here
        url = f"http://{opts['host']}:{opts['port']}"
        prepare_directory(metrics_dir(var))  # a previous run's counts would be added
        children = server_children(opts, var)
        stack = Stack(children, log=lambda m: self.stdout.write(f"pitwall: {m}"))
        stack.start()
        if not stack.wait_http(f"{url}/healthz"):
            self.stderr.write("pitwall: the web server did not come up; stopping")
            stack.stop()
            raise SystemExit(1)
        if opts["sim_hosts"] > 0:  # once the server answers, so no agent starts by spooling
            token_dir = var / "sim-fleet" / "tokens"
            self._tokens(token_dir, [host_name(i) for i in range(1, opts["sim_hosts"] + 1)])
            stack.children.append(Child("simulated-fleet", [
                python(), "-m", "agents.sim", "fleet", "--hosts", str(opts["sim_hosts"]),
                "--gpus", str(opts["sim_gpus"]), "--server", url, "--token-dir", str(token_dir),
                "--state-dir", str(var / "sim-fleet"), "--supervise"]))
            stack.start()
            self._demo_deployments(opts["sim_hosts"], opts["sim_gpus"])
            self._demo_service(stack, url, var)
        real = self._real_vllm(stack, url, var) if opts["real_vllm"] else None
        self._banner(url, opts["sim_hosts"], opts["sim_gpus"], real)
        raise SystemExit(stack.supervise())

    def _real_vllm(self, stack: Stack, url: str, var: Path) -> RealVllmDemo | None:
        try:
            demo = RealVllmDemo.from_env(var)
        except NotInstalled as exc:
            self.stderr.write(f"pitwall: {exc}; starting without it")
            return None
        token_file = self._tokens(demo.workdir / "tokens", [demo.hostname])[demo.hostname]
        stack.children += [demo.agent(url, token_file), demo.load_generator()]
        stack.start()
        deadline = time.monotonic() + INVENTORY_WAIT_S
        while not demo.ensure_service():
            if time.monotonic() > deadline:
                self.stderr.write(f"pitwall: {demo.hostname} did not report in "
                                  f"{INVENTORY_WAIT_S:.0f} s: no real vLLM service created")
                return None
            time.sleep(1.0)
        return demo

    def _demo_service(self, stack: Stack, url: str, var: Path) -> None:
        """The router's host and its agent, the demo service once that host has reported,
        and the clients that load the service through its router."""
        workdir = var / "sim-router"
        token = self._tokens(workdir / "tokens", [service_demo.ROUTER_HOSTNAME])
        stack.children.append(service_demo.router_agent(
            url, token[service_demo.ROUTER_HOSTNAME], workdir))
        stack.start()
        deadline = time.monotonic() + INVENTORY_WAIT_S
        while not service_demo.ensure_service():
            if time.monotonic() > deadline:
                self.stderr.write(f"pitwall: {service_demo.ROUTER_HOSTNAME} did not report in "
                                  f"{INVENTORY_WAIT_S:.0f} s: no demo service created")
                return
            time.sleep(1.0)
        stack.children.append(service_demo.load_generator())
        stack.start()

    def _tokens(self, token_dir: Path, hostnames: list[str]) -> dict[str, Path]:
        """One agent token per host, kept in files its agent reads (mode 600); a file whose
        token is still valid is kept."""
        token_dir.mkdir(parents=True, exist_ok=True)
        paths = {}
        for hostname in hostnames:
            path = paths[hostname] = token_dir / hostname
            lookup = path.read_text().split("_")[1] if path.exists() else None
            if lookup and AgentToken.objects.filter(
                    lookup=lookup, host__hostname=hostname, revoked_at__isnull=True).exists():
                continue
            token, _ = issue_agent_token(hostname)
            path.touch(mode=0o600)
            path.write_text(token)
        return paths

    def _demo_deployments(self, hosts: int, gpus: int) -> None:
        """One deployment per simulated host, once its agent has reported its GPUs (a
        deployment names GPUs the host has); an existing one is left as the operator left it."""
        deadline = time.monotonic() + INVENTORY_WAIT_S
        pending = list(range(1, hosts + 1))
        while pending and time.monotonic() < deadline:
            pending = [i for i in pending if not self._demo_deployment(i, gpus)]
            if pending:
                time.sleep(1.0)
        for i in pending:
            self.stderr.write(f"pitwall: {host_name(i)} reported no GPUs in "
                              f"{INVENTORY_WAIT_S:.0f} s: no deployment created for it")

    def _demo_deployment(self, i: int, gpus: int) -> bool:
        host = Host.objects.filter(hostname=host_name(i)).first()
        if host is None or Gpu.objects.filter(host=host, present=True).count() < gpus:
            return False
        if Deployment.objects.filter(host=host).exists():
            return True
        # Half the GPUs: the demo service's replicas take the other half.
        standalone = max(1, gpus // 2)
        args = {"tensor_parallel_size": standalone, "max_num_seqs": 128,
                **DEMO_ARGS.get(i, {})}
        deployments.save(Deployment(
            host=host, name="llama-70b", model="meta-llama/Llama-3.1-70B-Instruct",
            port=BASE_PORT + i, gpu_indices=list(range(standalone)), args=args,
            vllm_version=vllm_args.DEFAULT_VERSION,
            env={"PITWALL_SIM_LOAD": str(DEMO_LOAD.get(i, 4.0)), "PITWALL_SIM_SEED": str(i)},
            drain_timeout_s=10), reason="make run: the simulated fleet's demo deployment")
        return True

    def _banner(self, url: str, hosts: int, gpus: int, real: RealVllmDemo | None) -> None:
        lines = [
            "",
            f"  Pitwall is running: {url}/",
            "  Log in as: admin (password: PITWALL_ADMIN_PASSWORD, or the one printed when the "
            "admin user was created)",
            f"  API docs:  {url}/api/v1/docs/",
            f"  Simulated fleet: {hosts} hosts x {gpus} simulated GPUs; each agent runs its "
            f"host's deployment (a simulated vLLM): {url}/deployments/",
            f"  Service {service_demo.SERVICE_NAME}: {service_demo.REPLICAS} simulated "
            f"replicas behind vLLM's router on port {service_demo.router_port()}, under "
            f"steady load: {url}/services/",
            *([real.banner(url)] if real else []),
            "  Ctrl-C stops every process.",
            "",
        ]
        self.stdout.write("\n".join(lines))
