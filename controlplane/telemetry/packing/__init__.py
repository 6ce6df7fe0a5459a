"""Packed raw history: sealed days' raw rows as per-minute arrays (schema.py), the job that
packs them (job.py, merge.py) and the reads that see raw and packed rows as one (read.py).
docs/history.md tells the whole story."""
