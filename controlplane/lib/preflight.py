"""Say exactly what is missing before anything starts: PostgreSQL, the database, Redis."""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg
import redis
from psycopg import sql

from controlplane.lib.env import ConfigError


class Missing(Exception):
    """A service Pitwall needs is not there; the message says how to get it."""


POSTGRES_HELP = (
    "Start PostgreSQL (on Debian: `pg_ctlcluster --skip-systemctl-redirect $(ls "
    "/etc/postgresql) main start`, or `docker compose up -d postgres`), or point DATABASE_URL "
    "at a running server, e.g. postgres://user:password@host:5432/pitwall."
)
REDIS_HELP = (
    "Start Redis (`redis-server --daemonize yes --bind 127.0.0.1`, or `docker compose up -d "
    "redis`), or point REDIS_URL at a running server, e.g. redis://host:6379/0."
)


def check_postgres(db: dict, create: bool = True) -> str:
    """Connects to the server; creates the database when missing. Returns a status line."""
    where = f"{db.get('HOST') or 'local socket'}:{db.get('PORT') or 5432}"
    params = {"host": db.get("HOST") or None, "port": db.get("PORT") or None,
              "user": db.get("USER") or None, "password": db.get("PASSWORD") or None,
              "connect_timeout": 3,
              **{k: v for k, v in db.get("OPTIONS", {}).items() if k != "pool"}}
    try:
        with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone()
            if exists:
                return f"PostgreSQL at {where}: database {db['NAME']} is there"
            if not create:
                raise Missing(f"PostgreSQL at {where} has no database {db['NAME']}")
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
            return f"PostgreSQL at {where}: created database {db['NAME']}"
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else "no answer"
        raise Missing(f"PostgreSQL is not reachable at {where} ({reason}). {POSTGRES_HELP}") \
            from None


def check_redis(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"REDIS_URL must start with redis:// (got {url!r})")
    where = f"{parts.hostname}:{parts.port or 6379}"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        raise Missing(f"Redis is not reachable at {where} ({exc}). {REDIS_HELP}") from None
    return f"Redis at {where}: answering"
