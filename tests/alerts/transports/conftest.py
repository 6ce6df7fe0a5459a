"""The message the transport tests send (the receivers: tests/support/receivers.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controlplane.alerts.transports import Notification
from tests.alerts.transports.messages import kv_cache_alert


@pytest.fixture
def message() -> Notification:
    return Notification(
        id="0f7c2a4e-notif-1",
        status="firing",
        receiver="oncall",
        group_key='{}:{alertname="KVCacheFull"}',
        group_labels={"alertname": "KVCacheFull"},
        alerts=[kv_cache_alert("gpu-07"), kv_cache_alert("gpu-08", "resolved")],
        created_at=datetime(2026, 12, 2, 14, 31, tzinfo=UTC),
        external_url="https://pitwall.example.com",
    )
