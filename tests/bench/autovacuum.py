"""A stand-in for PostgreSQL's autovacuum, for a server that runs with it off (this project's
CI configuration does: ``autovacuum = off``), while a benchmark runs the stack for minutes.

Without it the tables updated or rewritten in place (hosts and agent streams updated by every
batch, the alert slices deleted and rebuilt every cycle) keep their dead rows: their size and
the queries over them grow without bound, which no deployment with PostgreSQL's default
(autovacuum on) sees. Every ``naptime`` seconds, like the launcher, it vacuums the tables past
autovacuum's default thresholds and analyzes those past the analyze ones. Its connection is to
the stack's database, so its backend's CPU is billed to the stack as autovacuum's would be.
"""

from __future__ import annotations

import contextlib
import threading

import psycopg

# PostgreSQL's defaults: autovacuum_vacuum_threshold, autovacuum_vacuum_scale_factor,
# autovacuum_analyze_threshold, autovacuum_analyze_scale_factor.
DUE_SQL = """
SELECT format('%I.%I', schemaname, relname),
       n_dead_tup > 50 + 0.2 * n_live_tup,
       n_mod_since_analyze > 50 + 0.1 * n_live_tup
FROM pg_stat_user_tables
WHERE n_dead_tup > 50 + 0.2 * n_live_tup OR n_mod_since_analyze > 50 + 0.1 * n_live_tup
"""


def server_autovacuum_on(conn) -> bool:
    with conn.cursor() as cur:
        cur.execute("SHOW autovacuum")
        return cur.fetchone()[0] == "on"


def one_round(conn) -> int:
    """Vacuum and/or analyze each table that is due; returns how many were."""
    with conn.cursor() as cur:
        cur.execute(DUE_SQL)
        due = cur.fetchall()
        for table, vacuum, analyze in due:
            verb = f"VACUUM {'(ANALYZE) ' if analyze else ''}" if vacuum else "ANALYZE "
            with contextlib.suppress(psycopg.Error):  # a slice partition dropped meanwhile
                cur.execute(verb + table)
    return len(due)


class StandIn:
    """Runs ``one_round`` every ``naptime`` seconds in a thread until ``stop()``."""

    def __init__(self, conninfo: str, naptime: float) -> None:
        self.conninfo, self.naptime = conninfo, naptime
        self.stopping = threading.Event()
        self.rounds = self.tables = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            while not self.stopping.wait(self.naptime):
                self.tables += one_round(conn)
                self.rounds += 1
