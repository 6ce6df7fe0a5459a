"""Protocol v2's column form of a batch (agents.protocol.to_columns)."""

from __future__ import annotations

from agents.protocol import from_columns, to_columns


def _batch(samples: list[dict], **extra) -> dict:
    return {"protocol": 1, "agent": {"version": "t", "boot_id": "b", "seq": 3},
            "samples": samples, **extra}


def test_one_sample_becomes_one_value_per_row_without_sample_indexes():
    sample = {"ts": 10.0, "host": {"load1": 0.5},
              "gpus": [{"uuid": "G0", "util_pct": 1.0}, {"uuid": "G1", "util_pct": 2.0}]}

    body = to_columns(_batch([sample], host={"hostname": "h"}))

    assert body == {"protocol": 2, "agent": {"version": "t", "boot_id": "b", "seq": 3},
                    "host": {"hostname": "h"}, "ts": [10.0], "hosts": {"load1": [0.5]},
                    "gpus": {"uuid": ["G0", "G1"], "util_pct": [1.0, 2.0]}}


def test_several_samples_carry_each_rows_sample_index_and_null_for_a_missing_key():
    samples = [{"ts": 10.0, "gpus": [{"uuid": "G0", "util_pct": 1.0}]},
               {"ts": 11.0, "host": {"load1": 0.5},
                "gpus": [{"uuid": "G0", "temp_c": 50.0}, {"uuid": "G1", "util_pct": 2.0}]}]

    body = to_columns(_batch(samples))

    assert body["ts"] == [10.0, 11.0]
    assert body["hosts"] == {"at": [1], "load1": [0.5]}
    assert body["gpus"] == {"at": [0, 1, 1], "uuid": ["G0", "G0", "G1"],
                            "util_pct": [1.0, None, 2.0], "temp_c": [None, 50.0, None]}


def test_a_batch_without_samples_keeps_only_its_header():
    assert to_columns(_batch([])) == {"protocol": 2, "agent": {"version": "t", "boot_id": "b",
                                                               "seq": 3}, "ts": []}


def test_from_columns_gives_back_the_v1_batch_for_a_server_that_predates_2():
    samples = [{"ts": 10.0, "gpus": [{"uuid": "G0", "util_pct": 1.0}]},
               {"ts": 11.0, "host": {"load1": 0.5},
                "gpus": [{"uuid": "G0", "temp_c": 50.0}, {"uuid": "G1", "util_pct": 2.0}],
                "engines": [{"name": "e", "up": 1}]}]
    one = [{"ts": 12.0, "host": {"load1": 0.1}, "processes": [{"pid": 7, "threads": 3}]}]

    for batch in (_batch(samples, host={"hostname": "h"}), _batch(one), _batch([])):
        assert from_columns(to_columns(batch)) == batch
