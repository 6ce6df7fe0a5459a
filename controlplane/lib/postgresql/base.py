"""Django's PostgreSQL backend, with a pool that never hands out a connection the server closed.

Each process keeps up to ``DATABASE_POOL_MAX`` idle connections (settings.DATABASES). When
PostgreSQL restarts (fast or immediate shutdown), fails over or terminates sessions, every one
of them is dead, but psycopg_pool learns it only when one is used: each idle connection cost
one page, API request, WebSocket check or ingest token lookup a 500 after PostgreSQL was back
(7 in a row on a web process with no traffic during a 1-second restart). psycopg_pool's own
check (``CONN_HEALTH_CHECKS``) asks the server on every checkout (a round trip) and, once one
fails, backs off 1, 2, 4 s before it tries the next: the first request after a restart waited
its whole 10-second pool timeout and failed anyway.

The server says goodbye before it closes (a FATAL "terminating connection" message, then the
end of the stream), and an idle pooled connection has nothing else to read (Pitwall never
LISTENs). So a checkout looks at the socket first, without a round trip (a zero-timeout poll):
a readable one is discarded (the pool opens a replacement in the background) and the next is
taken, until one is quiet. The first checkout after a restart empties the pool of the dead
connections at once and waits only for a new one.
"""

from __future__ import annotations

import logging
import select

from django.db.backends.postgresql import base
from psycopg import Connection, pq

log = logging.getLogger(__name__)


def server_hung_up(connection: Connection) -> bool:
    """Whether the server closed (or is closing) this idle connection: it is closed on our
    side, or its socket has something to read, which an idle connection only has when the
    server said goodbye."""
    if connection.closed or connection.pgconn.status != pq.ConnStatus.OK:
        return True
    poller = select.poll()  # not select.select: it fails on descriptors past 1023
    poller.register(connection.pgconn.socket, select.POLLIN)
    return bool(poller.poll(0))


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        pool = self.pool
        if pool is None:
            return connection
        discarded = 0
        # Bounded: past the pool's size every connection is one the pool opened just now.
        while discarded < pool.max_size and server_hung_up(connection):
            connection.close()
            pool.putconn(connection)  # a closed connection: dropped, a new one is opened
            discarded += 1
            connection = super().get_new_connection(conn_params)
        if discarded:
            log.warning("database pool: %d connection(s) the server had closed were discarded "
                        "(PostgreSQL restarted or ended the sessions)", discarded)
        return connection
