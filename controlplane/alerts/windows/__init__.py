"""Rule windows from 10-s slices of the raw samples (schema.py says why and how)."""

from controlplane.alerts.windows.slices import ensure_partitions, isolated, refresh, window_start

__all__ = ["ensure_partitions", "isolated", "refresh", "window_start"]
