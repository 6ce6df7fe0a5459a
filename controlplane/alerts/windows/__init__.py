"""Rule windows from 10-s slices of the raw samples, kept in the evaluating process
(store.py says why and how)."""

from controlplane.alerts.windows.slices import window_start

__all__ = ["window_start"]
