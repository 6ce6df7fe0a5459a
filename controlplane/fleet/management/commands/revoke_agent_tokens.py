from django.core.management.base import BaseCommand, CommandError

from controlplane.fleet.models import Host
from controlplane.fleet.tokens import revoke_agent_tokens


class Command(BaseCommand):
    help = ("Revoke every agent token of HOSTNAME; the ingest endpoint refuses them from their "
            "next batch. Its history stays.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("hostname")

    def handle(self, hostname: str, **options) -> None:
        if not Host.objects.filter(hostname=hostname).exists():
            raise CommandError(f"no host named {hostname!r}")
        count = revoke_agent_tokens(hostname)
        self.stdout.write(f"Revoked {count} agent token(s) of {hostname}.")
