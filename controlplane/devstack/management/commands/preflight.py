from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from controlplane.lib.preflight import Missing, check_postgres, check_redis


class Command(BaseCommand):
    help = "Check that PostgreSQL and Redis answer (creating the database if missing)."

    def handle(self, **options) -> None:
        problems = []
        for check, arg in ((check_postgres, connections.databases["default"]),
                           (check_redis, settings.REDIS_URL)):
            try:
                self.stdout.write(check(arg))
            except Missing as exc:
                problems.append(str(exc))
        if problems:
            raise CommandError("\n".join(["Pitwall cannot start:", *problems]))
