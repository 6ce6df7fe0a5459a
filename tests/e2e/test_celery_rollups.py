"""The rollups are built by a real Celery beat and worker, as `make run` starts them.

Beat, worker and a private Redis broker (so no other Celery on this machine takes the task)
run as subprocesses on the test database; raw rows of a settled minute go in, and the
1-minute rollup of that minute appears with the values computed from them.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from controlplane.fleet.models import Gpu, Host
from controlplane.telemetry import partitions
from controlplane.telemetry.rollups import TABLES as ROLLUPS
from tests.support.live import RedisServer, celery_worker_and_beat, server_env
from tests.support.polling import wait_until

# Real processes or minutes of work: `make test` runs them, `make test-fast` leaves them
# out; seconds: about what each test takes (slow tests start first, the longest first).
pytestmark = pytest.mark.slow(seconds=8)


def rolled_minute(gpu_id: int, minute: int):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT n, util_pct_min, util_pct_max, util_pct_avg, util_pct_last "
                       f"FROM {ROLLUPS['1m']['gpu'].name} WHERE gpu_id = %s "
                       "AND ts = to_timestamp(%s)", [gpu_id, minute])
        return cursor.fetchone()


def test_celery_beat_and_a_worker_roll_up_a_settled_minute(empty_samples, tmp_path):
    host = Host.objects.create(hostname="celery-host")
    gpu = Gpu.objects.create(host=host, index=0, uuid="GPU-celery-0")
    minute = int(time.time()) // 60 * 60 - 180  # ended two minutes ago: settled
    values = [10.0, 20.0, 30.0, 60.0]
    with connection.cursor() as cursor:
        partitions.ensure(cursor, {partitions.day_of(minute)})
        for i, value in enumerate(values):
            cursor.execute("INSERT INTO telemetry_gpu_sample (gpu_id, ts, util_pct) "
                           "VALUES (%s, to_timestamp(%s), %s)", [gpu.id, minute + 15 * i, value])

    broker = RedisServer(tmp_path)
    broker.start()
    env = {**server_env(), "REDIS_URL": broker.url, "CELERY_BROKER_URL": broker.url,
           "PITWALL_ROLLUP_INTERVAL_S": "2"}
    worker, beat = celery_worker_and_beat(env, tmp_path, concurrency=1)
    try:
        row = wait_until(lambda: rolled_minute(gpu.id, minute), 90,
                         lambda: f"no rollup:\n{worker.output()}\n{beat.output()}")
    finally:
        beat.stop()
        worker.stop()
        broker.stop()
    assert row[0] == len(values)
    assert (row[1], row[2], row[4]) == (10.0, 60.0, 60.0)
    assert abs(row[3] - sum(values) / len(values)) < 1e-6
