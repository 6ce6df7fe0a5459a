"""What the evaluator's slices cover, recorded in PostgreSQL (store.py says why): an UNLOGGED
table (entity, lo, hi) that migration 0003 made.

The slices themselves live in the evaluating process (store.py); they were UNLOGGED tables
before, which migration 0008 drops.
"""

from __future__ import annotations

STATE_TABLE = "alerts_slice_state"
