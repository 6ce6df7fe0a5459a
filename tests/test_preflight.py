"""`make run` and `make test` start with `manage.py preflight`: it names what is missing."""

from __future__ import annotations

from tests.test_settings import run_manage

SECRET = "preflight-test-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"


def test_it_names_a_missing_postgres_and_redis_and_how_to_get_them():
    done = run_manage("preflight", SECRET_KEY=SECRET,
                      DATABASE_URL="postgres://127.0.0.1:1/pitwall",
                      REDIS_URL="redis://127.0.0.1:1/0")
    assert done.returncode != 0
    assert "PostgreSQL is not reachable at 127.0.0.1:1" in done.stderr
    assert "pg_ctlcluster" in done.stderr and "DATABASE_URL" in done.stderr
    assert "Redis is not reachable at 127.0.0.1:1" in done.stderr
    assert "REDIS_URL" in done.stderr
    assert "Traceback" not in done.stderr


def test_it_passes_when_both_answer(transactional_db):
    done = run_manage("preflight", SECRET_KEY=SECRET)
    assert done.returncode == 0, done.stderr
    assert "Redis at 127.0.0.1:6379: answering" in done.stdout
