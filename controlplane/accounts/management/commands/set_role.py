from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from controlplane.accounts.roles import ORDER, assign_role, clear_roles


class Command(BaseCommand):
    help = "Give USERNAME a role (viewer, operator, deployer, admin) or none (docs/security.md)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("role", choices=[*ORDER, "none"])

    def handle(self, username: str, role: str, **options) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        if role == "none":
            clear_roles(user)
        else:
            assign_role(user, role)
        self.stdout.write(f"{username}: {role}")
