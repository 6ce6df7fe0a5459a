"""A webhook channel pointed at a real loopback receiver (tests/support/receivers.py)."""

from __future__ import annotations

import pytest

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import Channel
from tests.alerts.delivery.helpers import SECRET


@pytest.fixture
def webhook(db, receiver, allow_private) -> Channel:
    return service.create_channel(name="oncall", kind="webhook",
                                  config={"url": receiver.url, "secret": SECRET})
