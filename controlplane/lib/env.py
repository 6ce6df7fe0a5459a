"""Settings from environment variables: tiny helpers that fail loudly on a bad value."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable."""


def envstr(name: str, default: str | None = None) -> str:
    value = os.environ.get(name)
    if value is None or value == "":
        if default is None:
            raise ConfigError(f"{name} is not set")
        return default
    return value


def envsecret(name: str, default: str | None = None) -> str:
    """A secret from NAME, or from the file named by NAME_FILE (Docker/systemd secrets)."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE={path!r} cannot be read: {exc.strerror}") from exc
    return envstr(name, default)


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value == "":
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean (use true or false)")


def envint(name: str, default: int, minimum: int | None = None) -> int:
    raw = os.environ.get(name, "").strip()
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} is below its minimum {minimum}")
    return value


def envfloat(name: str, default: float, minimum: float | None = None,
             maximum: float | None = None) -> float:
    raw = os.environ.get(name, "").strip()
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value != value or (minimum is not None and value < minimum) \
            or (maximum is not None and value > maximum):
        raise ConfigError(f"{name}={raw!r} is outside {minimum}..{maximum}")
    return value


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(url: str, name: str = "DATABASE_URL") -> dict:
    """Django DATABASES entry from postgres://user:pass@host:port/dbname?sslmode=require."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ConfigError(f"{name} must start with postgres:// (got {parts.scheme or 'nothing'}://)")
    dbname = unquote(parts.path.lstrip("/"))
    if not dbname:
        raise ConfigError(f"{name} names no database (postgres://host:port/DBNAME)")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{name} has a bad port") from None
    options = dict(item.split("=", 1) for item in parts.query.split("&") if "=" in item)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": dbname,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(port or ""),
        "OPTIONS": options,
    }
