from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from controlplane.fleet.models import TokenScope
from controlplane.fleet.tokens import issue_api_token


class Command(BaseCommand):
    help = "Create a REST API token acting as USERNAME (Authorization: Bearer <token>)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label to recognise the token by")
        parser.add_argument("--quiet", action="store_true", help="print only the token")
        parser.add_argument("--read-only", action="store_true",
                            help="a token that only reads, whatever the user may do (a "
                                 "Prometheus scraping /metrics and the fleet exposition)")

    def handle(self, username: str, name: str, quiet: bool, read_only: bool,
               **options) -> None:
        scope = TokenScope.READ if read_only else TokenScope.WRITE
        try:
            token = issue_api_token(username, name, scope)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user named {username!r}") from None
        if not quiet:
            self.stdout.write(f"API token for {username} (shown once; only a hash is stored):")
        self.stdout.write(token)
