"""Settings come from the environment, fail loudly on bad values, and pass Django's deploy
checks with production defaults."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from controlplane.lib.env import ConfigError, database_from_url, envbool, envint, envsecret
from tests.support.live import ROOT


def run_manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SECURE_", "SESSION_", "CSRF_", "DEBUG", "SECRET_KEY"))}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**base, "DJANGO_SETTINGS_MODULE":
                                          "controlplane.settings", **env})


def test_production_settings_pass_the_deploy_checks():
    done = run_manage("check", "--deploy", "--fail-level", "WARNING",
                      SECRET_KEY="k" * 20 + "production-secret-key-with-enough-entropy-0123456789")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_missing_secret_key_stops_the_process_with_a_message_naming_it():
    done = run_manage("check")
    assert done.returncode == 2
    assert done.stderr == "pitwall: configuration error: SECRET_KEY is not set\n"


@pytest.mark.parametrize(("hold", "printed", "status"), [
    ("", "5.0", 0), ("0", "0.0", 0), ("6", "PITWALL_AGENT_HOLD_S='6' is outside 0.0..5.0", 2)])
def test_agents_are_asked_to_hold_their_samples_five_seconds_unless_set(hold, printed, status):
    # The tests' own servers ask for no hold (tests/settings.py); production asks for 5 s.
    done = run_manage("shell", "-c", "from django.conf import settings; "
                      "print(settings.PITWALL['AGENT_HOLD_S'])", SECRET_KEY="k" * 50,
                      PITWALL_AGENT_HOLD_S=hold)
    assert done.returncode == status
    assert printed in done.stdout + done.stderr


@pytest.mark.parametrize("name,value,reader,message", [
    ("X_BOOL", "maybe", lambda: envbool("X_BOOL", False), "X_BOOL='maybe' is not a boolean"),
    ("X_INT", "ten", lambda: envint("X_INT", 1), "X_INT='ten' is not an integer"),
    ("X_INT", "-1", lambda: envint("X_INT", 1, minimum=0), "X_INT=-1 is below its minimum 0"),
])
def test_a_bad_value_raises_naming_the_variable(monkeypatch, name, value, reader, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message):
        reader()


def test_a_secret_can_come_from_a_file(monkeypatch, tmp_path):
    (tmp_path / "secret").write_text("from-a-file\n")
    monkeypatch.setenv("X_SECRET_FILE", str(tmp_path / "secret"))
    assert envsecret("X_SECRET") == "from-a-file"
    monkeypatch.setenv("X_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="X_SECRET_FILE"):
        envsecret("X_SECRET")


@pytest.mark.parametrize("url,message", [
    ("mysql://h/db", "must start with postgres://"),
    ("postgres://h:5432/", "names no database"),
    ("postgres://h:port/db", "bad port"),
])
def test_a_malformed_database_url_is_refused(url, message):
    with pytest.raises(ConfigError, match=message):
        database_from_url(url)


def test_a_database_url_becomes_django_settings():
    db = database_from_url("postgres://user:p%40ss@db.example:6543/pitwall?sslmode=require")
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == (
        "user", "p@ss", "db.example", "6543", "pitwall")
    assert db["OPTIONS"] == {"sslmode": "require"}


def test_mail_settings_come_from_the_environment():
    done = run_manage("shell", "-c", "from django.conf import settings as s; "
                      "print(s.EMAIL_HOST, s.EMAIL_PORT, s.EMAIL_HOST_USER, s.EMAIL_USE_TLS)",
                      SECRET_KEY="k" * 50, EMAIL_HOST="smtp.example.com", EMAIL_PORT="587",
                      EMAIL_HOST_USER="pitwall", EMAIL_USE_TLS="true")
    assert done.stdout.splitlines()[-1].split() == ["smtp.example.com", "587", "pitwall",
                                                    "True"], done.stderr
    both = run_manage("check", SECRET_KEY="k" * 50, EMAIL_USE_TLS="true", EMAIL_USE_SSL="true")
    assert both.returncode == 2 and "EMAIL_USE_TLS and EMAIL_USE_SSL" in both.stderr


def test_compose_has_no_built_in_secret_or_admin_password():
    text = (ROOT / "compose.yaml").read_text()
    for name in ("SECRET_KEY", "PITWALL_ADMIN_PASSWORD"):
        assert f"{name}: ${{{name}:?" in text, name  # refuses to start without it
        assert f"{name}:-" not in text
