"""What the evaluator's slices cover, recorded in PostgreSQL (store.py says why).

The slices themselves live in the evaluating process (store.py); until issue 17 they were
UNLOGGED tables, which migration 0005 drops.
"""

from __future__ import annotations

STATE_TABLE = "alerts_slice_state"


def schema_sql() -> list[str]:
    return [f"CREATE UNLOGGED TABLE IF NOT EXISTS {STATE_TABLE} (entity text PRIMARY KEY, "
            f"lo timestamptz NOT NULL, hi timestamptz NOT NULL)"]


def all_names() -> list[str]:
    return [STATE_TABLE]
