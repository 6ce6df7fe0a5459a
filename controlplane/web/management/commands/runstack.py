import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from agents.children import Child, Stack, python
from controlplane.fleet.models import AgentToken
from controlplane.fleet.tokens import issue_agent_token


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

    def handle(self, **opts) -> None:
        var = Path(settings.BASE_DIR) / "var"
        var.mkdir(exist_ok=True)  # celery beat keeps its schedule here
        url = f"http://{opts['host']}:{opts['port']}"
        children = [
            Child("web", [python(), "-m", "uvicorn", "controlplane.asgi:application",
                          "--host", opts["host"], "--port", str(opts["port"]),
                          "--workers", str(opts["web_workers"]), "--log-level", "warning",
                          "--no-access-log"]),
            Child("celery-worker", [python(), "-m", "celery", "-A", "controlplane", "worker",
                                    "--loglevel", "warning", "--concurrency", "1"]),
            Child("celery-beat", [python(), "-m", "celery", "-A", "controlplane", "beat",
                                  "--loglevel", "warning",
                                  "--schedule", str(var / "celerybeat-schedule")]),
        ]
        stack = Stack(children, log=lambda m: self.stdout.write(f"pitwall: {m}"))
        stack.start()
        if not stack.wait_http(f"{url}/healthz"):
            self.stderr.write("pitwall: the web server did not come up; stopping")
            stack.stop()
            raise SystemExit(1)
        if opts["sim_hosts"] > 0:  # once the server answers, so no agent starts by spooling
            token_dir = self._sim_tokens(var / "sim-fleet" / "tokens", opts["sim_hosts"])
            stack.children.append(Child("simulated-fleet", [
                python(), "-m", "agents.sim", "fleet", "--hosts", str(opts["sim_hosts"]),
                "--gpus", str(opts["sim_gpus"]), "--server", url, "--token-dir", str(token_dir),
                "--state-dir", str(var / "sim-fleet")]))
            stack.start()
        self._banner(url, opts["sim_hosts"], opts["sim_gpus"])
        raise SystemExit(stack.supervise())

    def _sim_tokens(self, token_dir: Path, hosts: int) -> Path:
        """One agent token per simulated host, kept in files the agents read (mode 600)."""
        token_dir.mkdir(parents=True, exist_ok=True)
        for i in range(1, hosts + 1):
            hostname = f"sim-host-{i:02d}"
            path = token_dir / hostname
            lookup = path.read_text().split("_")[1] if path.exists() else None
            if lookup and AgentToken.objects.filter(
                    lookup=lookup, host__hostname=hostname, revoked_at__isnull=True).exists():
                continue
            token, _ = issue_agent_token(hostname)
            path.touch(mode=0o600)
            path.write_text(token)
        return token_dir

    def _banner(self, url: str, hosts: int, gpus: int) -> None:
        lines = [
            "",
            f"  Pitwall is running: {url}/",
            "  Log in as: admin (password: PITWALL_ADMIN_PASSWORD, or the one printed when the "
            "admin user was created)",
            f"  API docs:  {url}/api/v1/docs/",
            f"  Simulated fleet: {hosts} hosts x {gpus} simulated GPUs, one simulated vLLM each",
            "  Ctrl-C stops every process.",
            "",
        ]
        self.stdout.write("\n".join(lines))
