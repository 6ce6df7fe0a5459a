"""A streaming standby of the suite's private PostgreSQL, made as an operator makes one:
``pg_basebackup -R`` of the running primary into a directory of its own, started on a port of
its own. It logs every statement, with the client's application name, so a test can see
which server answered a read."""

from __future__ import annotations

import subprocess

import psycopg

from tests.faults.harness import PrivatePostgres

WEB = "[unknown]"  # PostgreSQL's application name of a client that gives none


class PrivateStandby(PrivatePostgres):
    def __init__(self, primary: PrivatePostgres) -> None:
        super().__init__()
        self.primary = primary

    def init(self) -> PrivateStandby:
        """Copy the primary (a fast checkpoint, its WAL streamed beside the copy) and write
        standby.signal and primary_conninfo (-R)."""
        subprocess.run([self._binary("pg_basebackup"), "-D", str(self.data), "-h", "127.0.0.1",
                        "-p", str(self.primary.port), "-U", "postgres", "-R", "-X", "stream",
                        "-c", "fast", "--no-sync"],
                       check=True, user=self._user, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\nlog_statement = 'all'\nlog_line_prefix = '%m [%p] app=%a '\n")
        return self

    def run(self, sql: str, params: tuple = (), database: str = "postgres") -> list[tuple]:
        """One statement on the standby (read-only: it refuses writes)."""
        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def statements_since(self, offset: int, text: str, app: str | None = None) -> list[str]:
        """The statements logged after byte ``offset`` of the log that hold ``text``, of the
        clients named ``app`` (``WEB``: the web process's pool, which names none) or of any."""
        with open(self.log, "rb") as log:
            log.seek(offset)
            logged = log.read().decode(errors="replace")
        return [line for line in logged.splitlines() if "statement:" in line and text in line
                and (app is None or f" app={app} " in line)]

    def log_size(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0
