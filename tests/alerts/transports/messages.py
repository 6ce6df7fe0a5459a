"""The alerts in the transport tests' messages."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from controlplane.alerts.transports import Alert

ONSET = datetime(2026, 12, 2, 14, 30, tzinfo=UTC)


def kv_cache_alert(host: str, status: str = "firing") -> Alert:
    return Alert(
        fingerprint=hashlib.sha256(host.encode()).hexdigest()[:16],
        status=status,  # type: ignore[arg-type]
        labels={"alertname": "KVCacheFull", "severity": "critical", "host": host},
        annotations={
            "summary": f"KV cache at 97% on {host} with 12 requests waiting",
            "description": "Requests queue <behind> a full cache & preemptions rise.",
        },
        starts_at=ONSET,
        ends_at=datetime(2026, 12, 2, 14, 45, tzinfo=UTC) if status == "resolved" else None,
        generator_url=f"https://pitwall.example.com/hosts/{host}?from=2026-12-02T14:20Z",
    )
