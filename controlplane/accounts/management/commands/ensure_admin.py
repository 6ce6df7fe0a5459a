import os
import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Create the superuser `admin` if missing. Its password is PITWALL_ADMIN_PASSWORD "
        "(also applied to an existing admin), else generated and printed once. A chosen "
        "password must pass the password validators (AUTH_PASSWORD_VALIDATORS)."
    )

    def handle(self, **options) -> None:
        users = get_user_model()
        wanted = os.environ.get("PITWALL_ADMIN_PASSWORD")
        admin = users.objects.filter(username="admin").first()
        if wanted:
            _check(wanted, admin or users(username="admin"))
        if admin is None:
            password = wanted or secrets.token_urlsafe(12)
            users.objects.create_superuser("admin", "", password)
            shown = "from PITWALL_ADMIN_PASSWORD" if wanted else password
            self.stdout.write(f"Created user admin, password: {shown}")
            if not wanted:
                self.stdout.write("  (shown this once; set PITWALL_ADMIN_PASSWORD to choose it)")
        elif wanted:
            admin.set_password(wanted)
            admin.save(update_fields=["password"])
            self.stdout.write("User admin: password set from PITWALL_ADMIN_PASSWORD")
        else:
            self.stdout.write("User admin exists; its password was printed when it was created "
                              "(set PITWALL_ADMIN_PASSWORD to reset it)")


def _check(password: str, user) -> None:
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise CommandError("PITWALL_ADMIN_PASSWORD is refused: " + " ".join(exc.messages)
                           ) from None
