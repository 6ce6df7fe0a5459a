#!/usr/bin/env python
"""Django's command-line utility for Pitwall."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.core.management import execute_from_command_line

    from controlplane.lib.env import ConfigError

    try:
        execute_from_command_line(sys.argv)
    except ConfigError as exc:  # a bad or missing setting: one line, not a traceback
        print(f"pitwall: configuration error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
