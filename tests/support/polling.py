"""The one way tests wait for something: poll a check until it holds.

The timeout is never asserted on: it only exists so that a broken build fails with an
explanation instead of hanging. ``await_until`` is the same loop for async test bodies, where
a blocking sleep would stop the event loop that has to make the check come true.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

ASYNC_TIMEOUT_S = 10  # socket tests: what they wait for happens in milliseconds


def wait_until(check: Callable[[], Any], timeout: float,
               explain: Callable[[], str] = lambda: "condition not met", every: float = 0.2):
    """Call ``check`` every ``every`` s until it returns something truthy, and return that.

    ``check`` may raise to stop early (a process that died, a state that can never turn).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(explain())
        time.sleep(every)


async def await_until(check: Callable[[], Any], explain: str,
                      timeout: float = ASYNC_TIMEOUT_S, every: float = 0.01):
    """``wait_until`` inside an event loop: sleeps without blocking the loop."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(explain)
        await asyncio.sleep(every)
