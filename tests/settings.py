"""Test settings: the production settings module, with the variables a test run needs."""

import os

os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production")
os.environ.setdefault("DATABASE_URL", "postgres://127.0.0.1:5432/pitwall")
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("SESSION_COOKIE_SECURE", "false")
os.environ.setdefault("CSRF_COOKIE_SECURE", "false")
os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
# Pages and their static files (uPlot from node_modules) served without collectstatic.
os.environ.setdefault("PITWALL_STATIC_FINDERS", "true")
# Servers started by the tests ask their agents for each sample at once: a test that waits for
# a sample would otherwise wait up to the 5-s hold more. The hold is tested where it is the
# subject (tests/agents/test_send_interval.py, tests/e2e/test_agent_hold.py), and the
# production default by tests/test_settings.py.
os.environ.setdefault("PITWALL_AGENT_HOLD_S", "0")

from controlplane.settings import *  # noqa: E402,F403

# WhiteNoise warns on every request when the static root is missing (a clean checkout has
# not run collectstatic): give the tests an empty one.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405

# Parallel pytest sessions on one machine (helpers, a CI run beside a session) each take their
# own test database: PITWALL_TEST_DB names it.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("PITWALL_TEST_DB", "test_pitwall")}  # noqa: F405
# Django's PostgreSQL backend with a flush that skips the empty tables (the transactional
# tests end with one): tests/support/postgresql/base.py.
DATABASES["default"]["ENGINE"] = "tests.support.postgresql"  # noqa: F405

# A password hash costs 0.2-0.5 s of CPU with the production hasher (PBKDF2, a million
# rounds), and hundreds of tests make users with passwords or sign in with them: the tests
# hash with MD5, which costs nothing. No test is about the hasher (Django's own code); the
# production settings are checked as they are by tests/test_settings.py (manage.py check).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
