"""The stack-cost benchmark's own parts: the worker log it reads, the disk growth it
extrapolates, its autovacuum stand-in (the benchmark itself runs with `make bench-stack`)."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.bench import autovacuum
from tests.bench.stack_cost import disk_growth, task_times
from tests.support.polling import wait_until

EVAL = "controlplane.alerts.tasks.evaluate_rules"
LOG = "".join((  # Celery's own format for a finished task, as the worker logs it at info
    f"[2026-12-04 09:00:00,001: INFO/MainProcess] Task {EVAL}[ab-1] received\n",
    f"[2026-12-04 09:00:01,200: INFO/ForkPoolWorker-1] Task {EVAL}[ab-1] succeeded in 1.25s: "
    "{'rules': 40}\n",
    f"[2026-12-04 09:00:02,000: INFO/ForkPoolWorker-1] Task {EVAL}[ab-9] succeeded in 0.01s: "
    "{'skipped': True, 'rules': 0}\n",
    "[2026-12-04 09:00:05,000: INFO/ForkPoolWorker-1] Task "
    "controlplane.telemetry.tasks.roll_up[cd-2] succeeded in 0.5s: None\n",
    f"[2026-12-04 09:00:11,000: INFO/ForkPoolWorker-1] Task {EVAL}[ef-3] succeeded in 0.75s: "
    "{'rules': 40}\n",
    "[2026-12-04 09:00:11,000: WARNING/ForkPoolWorker-1] alert evaluation: a cycle of 40 rules "
    "took 11.0 s, longer\n",
))


def test_task_times_reads_the_window_between_offsets_and_leaves_out_skipped_cycles(tmp_path):
    log = tmp_path / "stack.log"
    log.write_text(LOG)
    whole = task_times(log, 0, len(LOG.encode()))
    assert whole["tasks"]["evaluate_rules"] == {"runs": 2, "mean_s": 1.0, "max_s": 1.25}
    assert whole["tasks"]["roll_up"]["runs"] == 1
    assert whole["alert_cycles_s"] == [1.25, 0.75]
    assert whole["alert_cycles_longer_than_interval"] == 1
    later = task_times(log, LOG.index("[2026-12-04 09:00:05"), len(LOG.encode()))
    assert later["alert_cycles_s"] == [0.75] and "roll_up" in later["tasks"]


def test_disk_growth_is_extrapolated_to_an_hour_and_splits_out_the_history():
    before = {"tables": {"telemetry_gpu_sample": 0, "fleet_host": 100}, "database": 0,
              "at": 0.0}
    after = {"tables": {"telemetry_gpu_sample": 60 * 2**20, "fleet_host": 100 + 6 * 2**20,
                        "alerts_slice_gpu": 0}, "database": 66 * 2**20, "at": 60.0}
    grew = disk_growth(before, after)
    assert grew["database_mb_per_hour"] == 66 * 60
    assert grew["history_mb_per_hour"] == 60 * 60
    assert grew["tables_mb_per_hour"] == {"telemetry_gpu_sample": 3600.0, "fleet_host": 360.0}


@pytest.mark.django_db(transaction=True)
def test_the_autovacuum_stand_in_vacuums_a_table_past_autovacuums_threshold():
    connection.ensure_connection()
    raw = connection.connection  # autocommit outside atomic blocks: VACUUM may run
    with raw.cursor() as cur:
        cur.execute("CREATE TABLE bench_vacuum_probe (id int)")
    try:
        with raw.cursor() as cur:
            cur.execute("INSERT INTO bench_vacuum_probe SELECT generate_series(1, 1000)")
            cur.execute("ANALYZE bench_vacuum_probe")
            cur.execute("DELETE FROM bench_vacuum_probe WHERE id <= 500")  # past 50 + 20 %
            cur.execute("SELECT pg_stat_force_next_flush()")
        wait_until(lambda: dead_rows(raw) == 500, 10, lambda: "the deletes never reached the stats")
        assert autovacuum.one_round(raw) >= 1
        assert dead_rows(raw) == 0
    finally:
        with raw.cursor() as cur:
            cur.execute("DROP TABLE bench_vacuum_probe")


def dead_rows(raw) -> int:
    with raw.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute("SELECT n_dead_tup FROM pg_stat_user_tables "
                    "WHERE relname = 'bench_vacuum_probe'")
        return cur.fetchone()[0]
