"""The state half's array literals read back in PostgreSQL as the values they were built from:
text that needs escaping, NULLs, and timestamps sent as microseconds, to the microsecond."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from controlplane.alerts.arrays import from_micros, numbers, texts, timestamps

pytestmark = pytest.mark.django_db


def read_back(sql: str, literal: str) -> list:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT array_agg(x ORDER BY n) FROM unnest({sql}) WITH ORDINALITY "
                       "AS u(x, n)", {"a": literal})
        return cursor.fetchone()[0]


def test_texts_come_back_as_written_escapes_and_nulls_included():
    plain = ["gpu:1", "host:2", ""]
    awkward = ['say "hi"', "back\\slash", None, "{x,y}", "NULL", "ü"]
    assert read_back("%(a)s::text[]", texts(plain)) == plain
    assert read_back("%(a)s::text[]", texts(awkward)) == awkward
    assert texts([]) == "{}"


def test_numbers_come_back_as_written():
    values = [1, None, 2**40, -3]
    assert read_back("%(a)s::int8[]", numbers(values)) == values
    floats = [0.1, 1e300, -2.5, None]
    assert read_back("%(a)s::float8[]", numbers(floats)) == floats


def test_timestamps_come_back_to_the_microsecond():
    now = datetime(2026, 12, 6, 14, 4, 7, 123457, tzinfo=UTC)
    values = [now, None, now, now - timedelta(days=20000, microseconds=1),
              datetime(2099, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT array_agg({from_micros('x')} ORDER BY n) "
                       "FROM unnest(%(a)s::int8[]) WITH ORDINALITY AS u(x, n)",
                       {"a": timestamps(values)})
        assert cursor.fetchone()[0] == values
