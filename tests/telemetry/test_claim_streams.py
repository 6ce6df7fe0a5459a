"""The database side of idempotency: pitwall_claim_streams returns the previous high seq of
each stream and raises it, every time."""

from __future__ import annotations

import uuid

from django.db import connection

from controlplane.fleet.models import Host
from controlplane.telemetry.models import AgentStream


def claim(host: int, boot: uuid.UUID, seq: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT previous FROM pitwall_claim_streams(%s::int[], %s::uuid[], %s::int8[],"
            " %s::text[], %s::int[], %s::int[])", [[host], [boot], [seq], ["t"], [host], []])
        return cursor.fetchone()[0]


def test_each_claim_returns_the_previous_high_seq_and_raises_it(db):
    host = Host.objects.create(hostname="claims").id
    boot = uuid.uuid4()
    answers = [claim(host, boot, seq) for seq in range(1, 201)]
    assert answers == list(range(0, 200))
    assert AgentStream.objects.get(host_id=host, boot_id=boot).max_seq == 200


def test_a_lower_seq_never_lowers_the_stream(db):
    host = Host.objects.create(hostname="claims").id
    boot = uuid.uuid4()
    claim(host, boot, 50)
    assert claim(host, boot, 7) == 50
    assert claim(host, boot, 51) == 50
    assert AgentStream.objects.get(boot_id=boot).max_seq == 51
    assert Host.objects.get(id=host).last_seen is not None
