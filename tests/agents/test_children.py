"""The process set behind `make run` and the simulated fleet: one death stops them all."""

from __future__ import annotations

import os
import signal
import sys
import threading

from agents.children import Child, Stack

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def test_when_one_child_dies_the_others_are_stopped_and_the_code_says_so():
    logs: list[str] = []
    stack = Stack([Child("a", SLEEPER), Child("b", SLEEPER)], log=logs.append)
    stack.start()
    first, second = (c.process for c in stack.children)
    os.kill(first.pid, signal.SIGKILL)
    assert stack.supervise() == 1
    assert second.poll() is not None  # stopped, not left behind
    assert any("a exited with code" in line for line in logs)


def test_sigterm_stops_every_child_and_exits_cleanly():
    stack = Stack([Child("a", SLEEPER), Child("b", SLEEPER)], log=lambda m: None)
    stack.start()
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    previous = signal.getsignal(signal.SIGTERM)
    assert stack.supervise() == 0
    assert signal.getsignal(signal.SIGTERM) is previous  # handlers are put back
    assert all(c.process.poll() is not None for c in stack.children)
