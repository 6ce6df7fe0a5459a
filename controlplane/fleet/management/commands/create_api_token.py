from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from controlplane.fleet.tokens import issue_api_token


class Command(BaseCommand):
    help = "Create a REST API token acting as USERNAME (Authorization: Bearer <token>)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label to recognise the token by")
        parser.add_argument("--quiet", action="store_true", help="print only the token")

    def handle(self, username: str, name: str, quiet: bool, **options) -> None:
        try:
            token = issue_api_token(username, name)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user named {username!r}") from None
        if not quiet:
            self.stdout.write(f"API token for {username} (shown once; only a hash is stored):")
        self.stdout.write(token)
