from django.core.management.base import BaseCommand

from controlplane.alerts.pack import load_default_pack


class Command(BaseCommand):
    help = "Create the default alert rules that are missing (--refresh: reset all of them)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--refresh", action="store_true",
                            help="overwrite the pack's rules with the shipped definitions")

    def handle(self, *args, refresh: bool = False, **options) -> None:
        names = load_default_pack(refresh=refresh)
        self.stdout.write(f"{len(names)} rule(s) written" + (f": {', '.join(names)}" if names
                                                               else ""))
