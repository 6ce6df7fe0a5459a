"""One running child: its process group, its exit, and the tail of what it prints.

Each child leads its own process group (a new session), so a signal to the group also reaches
the engine and worker processes vLLM forks. Its stdout and stderr share one pipe that a
thread reads line by line into a bounded tail: the pipe never fills, so the child never blocks
on a write however much it logs and whether or not anyone reads the tail.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections import deque
from typing import IO, Protocol

from agents.supervisor.launch import LaunchPlan

TAIL_LINES = 200
MAX_LINE_BYTES = 4096  # a progress bar redrawn with \r and no newline must not grow unbounded
DRAIN_S = 1.0  # at most this long, once, for the pipe's last lines after the leader exits


class LogTail:
    """The last lines of a deployment's output, across its restarts; thread-safe."""

    def __init__(self, maxlen: int = TAIL_LINES) -> None:
        self._lines: deque[str] = deque(maxlen=maxlen)
        self._lock = threading.Lock()  # iterating a deque while another thread appends raises

    def append(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def last(self, n: int) -> list[str]:
        with self._lock:
            return list(self._lines)[-n:] if n > 0 else []


class Process(Protocol):
    """What the supervisor needs of a child; unit tests pass a fake."""

    pid: int

    def poll(self) -> int | None: ...

    def signal_leader(self, signum: int) -> None: ...

    def signal_group(self, signum: int) -> None: ...


class ManagedProcess:
    def __init__(self, popen: subprocess.Popen[bytes], tail: LogTail) -> None:
        self.popen, self.pid = popen, popen.pid
        assert popen.stdout is not None
        self._reader = threading.Thread(target=_pump, args=(popen.stdout, tail), daemon=True,
                                        name=f"log-tail-{popen.pid}")
        self._reader.start()
        self._drained = False  # the tail holds what the leader printed before it exited

    def poll(self) -> int | None:
        """The exit status once the group leader has exited (-N: killed by signal N), with
        what it printed before exiting in the tail: up to a pipe's worth of lines may still be
        unread when it exits, and a crash's last lines are its reason. The wait is bounded: a
        process the leader left behind may hold the pipe open."""
        code = self.popen.poll()
        if code is not None and not self._drained:
            self._reader.join(DRAIN_S)
            self._drained = True
        return code

    def signal_leader(self, signum: int) -> None:
        """Signal the process the supervisor started (vLLM's API server) alone."""
        if self.popen.poll() is None:  # never signal a reaped pid: it may be someone else's
            self.popen.send_signal(signum)

    def signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)  # the group id is the leader's pid (new session)
        except ProcessLookupError:
            pass  # the whole group has exited already
        except PermissionError:
            # The leader was reaped and its pid now leads someone else's group: leave it be.
            pass


def spawn(plan: LaunchPlan, tail: LogTail) -> ManagedProcess:
    """Start the plan's command; OSError says why it could not (no such program, bad CPUs)."""
    try:
        popen = subprocess.Popen(
            plan.argv, env=plan.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
            preexec_fn=_binder(plan.cpus))
    except subprocess.SubprocessError as exc:
        # Only the binder runs before exec, and Popen reports its failure without the cause.
        raise OSError(f"cannot bind to CPUs {plan.cpus} (offline, or outside this agent's "
                      f"cpuset?): {exc}") from exc
    return ManagedProcess(popen, tail)


def _binder(cpus: list[int] | None):  # noqa: ANN202 - Popen's preexec_fn
    """Bind the child to its CPUs between fork and exec, so every thread and process vLLM
    starts inherits the mask. preexec_fn is unsafe when it takes locks another thread may
    hold at fork; this makes one syscall and allocates nothing shared."""
    if cpus is None:
        return None
    mask = frozenset(cpus)
    return lambda: os.sched_setaffinity(0, mask)


def _pump(stream: IO[bytes], tail: LogTail) -> None:
    with stream:
        for raw in iter(lambda: stream.readline(MAX_LINE_BYTES), b""):
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            tail.append(text.rsplit("\r", 1)[-1])  # a redrawn progress bar: its last state
