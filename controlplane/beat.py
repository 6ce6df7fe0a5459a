"""Celery beat's scheduler: while the broker (Redis) is unreachable, beat runs the alert cycle
itself, and every other periodic task waits for the broker.

Beat publishes each due task to Redis and a worker takes it from there, so with stock Celery a
Redis outage stops alert evaluation: beat's publishes fail and the worker receives nothing.
``Scheduler`` keeps alerting going without the broker:

- A publish that fails because the broker is unreachable starts an outage (one log line).
  Beat then runs the alert cycle's entries (``IN_BEAT``: evaluate the rules, dispatch
  notifications, deliver the due ones) in its own process, as the domain functions the tasks
  wrap. They are safe beside a worker that runs the same at once: each holds a PostgreSQL
  advisory lock or claims its rows with ``UPDATE … WHERE``.
- Every other entry (rollups, packing, partitions, tuning passes) is not run: it is counted
  as delayed, and sent once when the broker answers again (their work is a watermark that
  catches up: nothing is lost, it is late).
- Beat keeps running the alert cycle for ``WORKER_RECONNECT_S`` after the broker answers
  again: the worker reconnects on its own schedule (every 2, 4, 6 … up to 30 s) and would
  otherwise leave a gap in evaluation after a long outage.
- Every publish of beat is one attempt and one reconnection, without waiting (``ONE_TRY``), on
  a connection of its own whose sockets time out (``BEAT_TRANSPORT``): a refused connection
  costs milliseconds, a silent Redis (no TCP reset: a partition, a stalled server) at most
  twice the socket timeout, never a blocked loop. While down, beat tries the broker once every
  ``PROBE_S`` seconds. The publish that succeeds ends the
  outage: one line with how long it lasted and what was delayed.

Celery's scheduler connects before its first publish, retrying forever
(``broker_connection_max_retries`` is None): a beat started while Redis is down would never
tick. Here the first publish connects, within the publish retry policy.
"""

from __future__ import annotations

import copy
import logging
import socket
import time
from collections import Counter
from collections.abc import Callable

from celery.beat import PersistentScheduler, ScheduleEntry, SchedulingError
from kombu.exceptions import OperationalError
from kombu.utils.objects import cached_property

log = logging.getLogger(__name__)

PROBE_S = 5.0  # while the broker is down, one publish attempt this often
# The worker retries its broker connection 2, 4, 6 … up to 30 s apart (kombu's
# ensure_connection, which Celery calls with no intervals): after an outage beat runs the
# alert cycle this long more, so that no cycle waits in the queue for a worker still asleep.
WORKER_RECONNECT_S = 30.0
# The retry policy of beat's publishes: one reconnection at once (a connection from before an
# outage fails its first command even when Redis is back), no waiting. Celery's default (three
# retries, up to 0.6 s of sleep) would make each tick of an outage slower, on a silent Redis by
# whole socket timeouts; a publish that fails is not lost: the alert cycle runs here, the rest
# is sent when the broker answers.
ONE_TRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0, "interval_max": 0}
# Beat's own broker connection: a connect or a command on a silent Redis (no TCP reset: a
# network partition, a stalled server) gives up instead of blocking the loop. Beat only
# publishes, so no long blocking read needs a longer timeout.
BEAT_TRANSPORT = {"socket_connect_timeout": 2, "socket_timeout": 3}


def _evaluate() -> None:
    from controlplane.alerts.evaluate import evaluate_held
    from controlplane.alerts.tasks import NOTIFIED

    # With evaluator shards, beat is one more evaluator: it takes the shards whose workers
    # stopped renewing them (no tick reaches a worker without the broker), and gives them
    # back by letting the leases lapse once the workers evaluate again.
    results = evaluate_held(f"beat@{socket.gethostname()}")
    if any(to in NOTIFIED for result in results for *_, to in result.transitions):
        _dispatch()  # as the task does, at once instead of at the next dispatch tick


def _dispatch() -> None:
    from controlplane.alerts.delivery.dispatch import dispatch

    if dispatch():  # the worker's task queues one delivery per new row; here, all due rows
        _deliver_due()


def _deliver_due() -> None:
    from controlplane.alerts.delivery.service import deliver_due

    deliver_due()


# The alert cycle: what beat runs itself while the broker is down, by task name.
IN_BEAT: dict[str, Callable[[], None]] = {
    "controlplane.alerts.tasks.evaluate_rules": _evaluate,
    "controlplane.alerts.delivery.tasks.dispatch_notifications": _dispatch,
    "controlplane.alerts.delivery.tasks.deliver_due": _deliver_due,
}


class Outage:
    """Whether the broker is down, since when, and what waited for it."""

    def __init__(self) -> None:
        self.since: float | None = None  # time.monotonic() of the first failed publish
        self.next_probe = 0.0
        self.cycle_here_until = 0.0  # time.monotonic() until which beat runs the alert cycle
        self.delayed: Counter[str] = Counter()  # entry name -> runs not sent
        self.ran_in_beat: Counter[str] = Counter()

    @property
    def down(self) -> bool:
        return self.since is not None

    def probe_due(self) -> bool:
        return time.monotonic() >= self.next_probe

    def failed(self, exc: BaseException) -> None:
        self.next_probe = time.monotonic() + PROBE_S
        if self.since is None:
            self.since = time.monotonic()
            log.warning("beat: the broker is unreachable (%s); beat runs the alert cycle "
                        "itself (%s) and the other periodic tasks wait for the broker",
                        _reason(exc), ", ".join(name.rpartition(".")[2] for name in IN_BEAT))

    def ended(self) -> tuple[float, Counter[str]]:
        """Log the end of the outage; its length in seconds and the entries delayed."""
        lasted, delayed = time.monotonic() - (self.since or time.monotonic()), self.delayed
        log.warning("beat: the broker answers again after %.0f s; alert cycle steps run by "
                    "beat: %s; delayed, sent now: %s; beat runs the alert cycle %.0f s more, "
                    "while the worker reconnects", lasted, _counts(self.ran_in_beat),
                    _counts(delayed) or "nothing", WORKER_RECONNECT_S)
        self.since, self.delayed, self.ran_in_beat = None, Counter(), Counter()
        self.cycle_here_until = time.monotonic() + WORKER_RECONNECT_S
        return lasted, delayed

    def cycle_here(self) -> bool:
        """Whether the broker came back so recently that the worker may still be away."""
        return time.monotonic() < self.cycle_here_until


class Scheduler(PersistentScheduler):
    """PersistentScheduler that keeps the alert cycle running while the broker is down."""

    def __init__(self, *args, **kwargs) -> None:
        self.outage = Outage()
        super().__init__(*args, **kwargs)

    @cached_property
    def connection(self):
        return self.app.connection_for_write(transport_options=BEAT_TRANSPORT)

    @cached_property
    def producer(self):
        # No connection here (Celery's waits for one forever): the first publish connects.
        return self.Producer(self.connection, auto_declare=False)

    def apply_async(self, entry: ScheduleEntry, producer=None, advance: bool = True, **kwargs):
        outage = self.outage
        if outage.down and not outage.probe_due():
            return self._without_broker(entry)
        if not outage.down and entry.task in IN_BEAT and outage.cycle_here():
            return self._without_broker(entry)  # the broker is back, the worker maybe not
        try:
            result = super().apply_async(_one_try(entry), producer=producer, advance=advance,
                                         **kwargs)
        except SchedulingError as exc:
            if not _unreachable(exc, self.connection):
                raise
            outage.failed(exc)
            return self._without_broker(entry)
        if outage.down:
            self._catch_up(outage.ended()[1], producer, sent=entry.name)
        return result

    def _without_broker(self, entry: ScheduleEntry) -> None:
        run = IN_BEAT.get(entry.task)
        if run is None:
            self.outage.delayed[entry.name] += 1
            return
        if self.outage.down:
            self.outage.ran_in_beat[entry.name] += 1
        _run_here(entry.name, run)

    def _catch_up(self, delayed: Counter[str], producer, sent: str) -> None:
        """Send each delayed entry once, now, rather than at its next tick."""
        for name in delayed:
            if name == sent or name not in self.schedule:
                continue
            try:
                super().apply_async(_one_try(self.schedule[name]), producer=producer,
                                    advance=False)
            except SchedulingError as exc:  # gone again: its next tick tries again
                log.warning("beat: could not send the delayed %s: %s", name, _reason(exc))


def _one_try(entry: ScheduleEntry) -> ScheduleEntry:
    """The entry, published with the ``ONE_TRY`` retry policy."""
    bounded = copy.copy(entry)
    bounded.options = {**entry.options, "retry_policy": ONE_TRY}
    return bounded


def _run_here(name: str, run: Callable[[], None]) -> None:
    from django.db import close_old_connections

    close_old_connections()  # as a worker does around each task: a broken one is replaced
    try:
        run()
    except Exception:  # noqa: BLE001 - one failed step must not stop beat; the next tick retries
        log.exception("beat: %s failed while run by beat (broker down)", name)
    finally:
        close_old_connections()


def _unreachable(exc: BaseException, connection) -> bool:
    """Whether a failed publish failed for want of the broker (not a bug in an entry)."""
    errors = (OperationalError, *connection.connection_errors)
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, errors):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _reason(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{name} x{n}" for name, n in sorted(counter.items()))
