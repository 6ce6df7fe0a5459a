import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Create the superuser `admin` if missing. Its password is PITWALL_ADMIN_PASSWORD "
        "(also applied to an existing admin), else generated and printed once."
    )

    def handle(self, **options) -> None:
        users = get_user_model()
        wanted = os.environ.get("PITWALL_ADMIN_PASSWORD")
        admin = users.objects.filter(username="admin").first()
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
