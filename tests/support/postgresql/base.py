"""Pitwall's PostgreSQL backend with a cheaper flush, for the tests (tests/settings.py).

Transactional tests (and the browser and end-to-end tests, whose servers commit) end with
Django's flush: one TRUNCATE of every table, then post_migrate refills what migrate made
(content types, permissions, the role groups, the alert pack). A TRUNCATE of some forty
tables costs about a quarter of a second however few rows they hold, and most of them hold
none. This flush leaves the empty tables alone and deletes the rows of the others (every
foreign key is deferred, so the order does not matter); a table with a trigger of its own
(the append-only audit log refuses row deletes) is truncated. What remains is what Django's
flush leaves: every table empty, but for the ones post_migrate fills with what migrate made:
the content types, the permissions and the role groups with their permissions are kept as
they are, and post_migrate (which runs after every flush) puts back any of them a test took
away and gives each role group exactly its permissions again (accounts/apps.py), at a third
of the cost of making them anew. Anything but a plain flush (sequences reset, cascades) is
Django's own.
"""

from __future__ import annotations

from django.db.backends.postgresql import operations

from controlplane.lib.postgresql import base

FLUSH_SQL = """
DO $flush$
DECLARE
    name text;
    has_rows boolean;
    to_truncate text[] := '{}';
BEGIN
    FOREACH name IN ARRAY %s::text[] LOOP
        EXECUTE format('SELECT EXISTS (SELECT FROM %%I)', name) INTO has_rows;
        CONTINUE WHEN NOT has_rows;
        IF EXISTS (SELECT FROM pg_trigger WHERE tgrelid = name::regclass AND NOT tgisinternal)
        THEN
            to_truncate := to_truncate || name;
        ELSE
            EXECUTE format('DELETE FROM %%I', name);
        END IF;
    END LOOP;
    IF cardinality(to_truncate) > 0 THEN
        EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%%I', t), ', ')
                                FROM unnest(to_truncate) AS t);
    END IF;
END
$flush$
"""


# Filled by post_migrate, which re-syncs them after every flush: kept, not emptied.
KEPT = frozenset({"django_content_type", "auth_permission", "auth_group",
                  "auth_group_permissions"})


def _array(names: list[str]) -> str:
    return "ARRAY[" + ", ".join("'" + n.replace("'", "''") + "'" for n in names) + "]"


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or allow_cascade:
            return super().sql_flush(style, tables, reset_sequences=reset_sequences,
                                     allow_cascade=allow_cascade)
        return [FLUSH_SQL % _array(sorted(set(tables) - KEPT))]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
