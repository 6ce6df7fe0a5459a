"""The standby's own metrics (``/metrics``, docs/prometheus.md)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

LAG = Gauge(
    "pitwall_standby_lag_seconds", "How far the standby's replay is behind the primary, as "
    "this process last measured it (the largest over the processes)", multiprocess_mode="livemax")
USABLE = Gauge(
    "pitwall_standby_usable", "1 when this process reads from the standby, 0 while it skips it "
    "(behind or down; the smallest over the processes)", multiprocess_mode="livemin")
READS = Counter(
    "pitwall_standby_read_requests", "GET and HEAD requests (but the admin's, the health "
    "check's and the agents'), by the server that answered their reads: standby, or primary "
    "(the standby was skipped, or the client had just written)", ["server"])
SKIPS = Counter(
    "pitwall_standby_skips", "Times a process stopped reading from the standby, by reason "
    "(behind, down, promoted)", ["reason"])
