"""The stack-cost benchmark's own arithmetic: the worker log it reads and the disk growth it
extrapolates (the benchmark itself runs with `make bench-stack`)."""

from __future__ import annotations

from tests.bench.stack_cost import disk_growth, task_times

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
