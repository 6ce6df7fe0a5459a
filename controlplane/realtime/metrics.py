"""Live push's own metric (``/metrics``, docs/prometheus.md)."""

from __future__ import annotations

from prometheus_client import Gauge

# Summed over the live server processes; a dead process's count is dropped at the next scrape.
LIVE_CLIENTS = Gauge("pitwall_live_clients", "Browsers connected to live push (WebSockets "
                     "signed in and allowed to read the fleet)", multiprocess_mode="livesum")
