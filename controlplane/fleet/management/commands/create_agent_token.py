from django.core.management.base import BaseCommand, CommandError

from controlplane.fleet.tokens import issue_agent_token


class Command(BaseCommand):
    help = "Create a token that lets the agent on HOSTNAME write that host's telemetry."

    def add_arguments(self, parser) -> None:
        parser.add_argument("hostname")
        parser.add_argument("--quiet", action="store_true", help="print only the token")

    def handle(self, hostname: str, quiet: bool, **options) -> None:
        hostname = hostname.strip()
        if not hostname or len(hostname) > 253:
            raise CommandError("HOSTNAME must be 1 to 253 characters")
        token, host = issue_agent_token(hostname)
        if quiet:
            self.stdout.write(token)
            return
        self.stdout.write(f"Agent token for {host.hostname} (shown once; only a hash is stored):")
        self.stdout.write(token)
        self.stdout.write("Run on the host:  pitwall-agent run --server URL --token-file FILE")
