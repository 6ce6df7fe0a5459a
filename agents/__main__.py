"""``python -m agents`` is the same as the ``pitwall-agent`` console script."""

import sys

from agents.cli import main

sys.exit(main())
