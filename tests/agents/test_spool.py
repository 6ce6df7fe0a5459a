import gzip
import json
import os

import pytest

from agents.protocol import to_columns
from agents.spool import Spool


def batch(seq: int, samples: int = 1, boot_id: str = "boot-a") -> dict:
    return {
        "protocol": 1,
        "agent": {"version": "0.1.0", "boot_id": boot_id, "seq": seq},
        "samples": [{"ts": 1000.0 + seq + i / 10, "host": {"load1": 0.5}} for i in range(samples)],
    }


def seqs(spool: Spool, **limits) -> list[tuple[str, int]]:
    return [(s.batch["agent"]["boot_id"], s.batch["agent"]["seq"]) for s in spool.peek(**limits)]


def batch_files(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".json.gz"))


def test_it_replays_batches_oldest_first_across_restarts(tmp_path):
    first = Spool(tmp_path, max_bytes=10**9)
    for seq in (1, 2, 3):
        first.append(batch(seq, boot_id="boot-a"))

    second = Spool(tmp_path, max_bytes=10**9)  # the agent restarted with a new boot_id
    for seq in (1, 2):
        second.append(batch(seq, boot_id="boot-b"))

    assert seqs(Spool(tmp_path, max_bytes=10**9)) == [
        ("boot-a", 1), ("boot-a", 2), ("boot-a", 3), ("boot-b", 1), ("boot-b", 2)]


def test_it_keeps_order_after_the_head_was_acknowledged_and_the_agent_restarted(tmp_path):
    spool = Spool(tmp_path, max_bytes=10**9)
    for seq in (1, 2, 3):
        spool.append(batch(seq))
    spool.remove([s.name for s in spool.peek(max_batches=3)])
    spool.append(batch(4))

    restarted = Spool(tmp_path, max_bytes=10**9)
    restarted.append(batch(5))

    assert seqs(restarted) == [("boot-a", 4), ("boot-a", 5)]
    assert len(restarted) == 2


def test_it_evicts_the_oldest_batches_past_the_bound_and_counts_them(tmp_path):
    measure = Spool(tmp_path / "measure", max_bytes=10**9)
    batches = [batch(seq, samples=seq) for seq in range(1, 7)]
    sizes = []
    for b in batches:
        before = measure.bytes
        measure.append(b)
        sizes.append(measure.bytes - before)

    bounded = Spool(tmp_path / "bounded", max_bytes=sum(sizes[-3:]))
    for b in batches:
        bounded.append(b)

    assert seqs(bounded) == [("boot-a", 4), ("boot-a", 5), ("boot-a", 6)]
    assert bounded.bytes <= bounded.max_bytes
    # Batches 1..3 were evicted, holding 1 + 2 + 3 samples.
    assert bounded.evictions() == (3, 6)


def test_eviction_counts_survive_a_restart_until_acknowledged(tmp_path):
    spool = Spool(tmp_path, max_bytes=1)  # nothing fits: every batch is evicted at once
    spool.append(batch(1, samples=2))
    spool.append(batch(2, samples=3))

    restarted = Spool(tmp_path, max_bytes=1)
    assert restarted.evictions() == (2, 5)

    restarted.acknowledge_evictions(1, 2)
    assert Spool(tmp_path, max_bytes=1).evictions() == (1, 3)


def test_it_writes_whole_gzip_files_of_protocol_2_and_leaves_no_temporary_file(tmp_path):
    spool = Spool(tmp_path, max_bytes=10**9)
    spool.append(batch(1, samples=2))

    [name] = batch_files(tmp_path)
    assert name.endswith("-2.json.gz")  # the samples, counted from the v2 batch's ts
    assert json.loads(gzip.decompress((tmp_path / name).read_bytes())) == \
        to_columns(batch(1, samples=2))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_a_write_that_fails_before_the_rename_leaves_nothing_to_replay(tmp_path, monkeypatch):
    warnings: list[str] = []
    spool = Spool(tmp_path, max_bytes=10**9, warn=warnings.append)
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith(".json.gz"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    spool.append(batch(1))

    assert os.listdir(tmp_path) == ["evictions.json"]  # no batch file, no temporary file
    assert len(spool) == 0
    assert spool.evictions() == (1, 1)  # a batch we could not keep is reported, not hidden
    assert len(warnings) == 1 and "No space left" in warnings[0]


def test_a_temporary_file_left_by_a_crash_is_discarded_at_start(tmp_path):
    Spool(tmp_path, max_bytes=10**9).append(batch(1))
    (tmp_path / ".tmp-0000000000000001-1.json.gz").write_bytes(b"\x1f\x8b half a file")

    spool = Spool(tmp_path, max_bytes=10**9)

    assert seqs(spool) == [("boot-a", 1)]
    assert not (tmp_path / ".tmp-0000000000000001-1.json.gz").exists()


def test_a_corrupt_file_is_set_aside_with_a_warning(tmp_path):
    warnings: list[str] = []
    spool = Spool(tmp_path, max_bytes=10**9, warn=warnings.append)
    for seq in (1, 2, 3):
        spool.append(batch(seq))
    broken = batch_files(tmp_path)[1]
    (tmp_path / broken).write_bytes(b"not gzip at all")

    assert seqs(spool) == [("boot-a", 1), ("boot-a", 3)]
    assert (tmp_path / (broken + ".corrupt")).exists()
    assert len(warnings) == 1 and broken in warnings[0] and "corrupt" in warnings[0]
    assert len(spool) == 2

    # New names never collide with the file set aside, even after a restart.
    restarted = Spool(tmp_path, max_bytes=10**9)
    restarted.append(batch(4))
    assert seqs(restarted) == [("boot-a", 1), ("boot-a", 3), ("boot-a", 4)]


def test_a_truncated_file_is_corrupt_too(tmp_path):
    warnings: list[str] = []
    spool = Spool(tmp_path, max_bytes=10**9, warn=warnings.append)
    spool.append(batch(1))
    [name] = batch_files(tmp_path)
    data = (tmp_path / name).read_bytes()
    (tmp_path / name).write_bytes(data[: len(data) // 2])

    assert spool.peek() == []
    assert len(warnings) == 1


def test_replay_groups_stop_at_the_batch_count_limit(tmp_path):
    spool = Spool(tmp_path, max_bytes=10**9)
    for seq in range(1, 6):
        spool.append(batch(seq))

    assert seqs(spool, max_batches=2) == [("boot-a", 1), ("boot-a", 2)]


def test_replay_groups_stop_at_the_byte_limit_but_carry_at_least_one_batch(tmp_path):
    spool = Spool(tmp_path, max_bytes=10**9)
    for seq in range(1, 6):
        spool.append(batch(seq, samples=3))
    one = len(spool.peek(max_batches=1)[0].raw or b"")

    assert len(spool.peek(max_bytes=2 * one + one // 2)) == 2
    assert len(spool.peek(max_bytes=1)) == 1


def test_a_batch_larger_than_the_whole_bound_is_counted_as_evicted(tmp_path):
    warnings: list[str] = []
    spool = Spool(tmp_path, max_bytes=10**9, warn=warnings.append)
    spool.append(batch(1))
    spool.max_bytes = spool.bytes + 1  # room for nothing the size of a real batch
    spool.append(batch(2, samples=50))

    assert seqs(spool) == [("boot-a", 1)]
    assert spool.evictions() == (1, 50)
    assert len(warnings) == 1


@pytest.mark.parametrize("content", ["{not json", '{"batches": "x"}'])
def test_an_unreadable_eviction_counter_restarts_at_zero_with_a_warning(tmp_path, content):
    (tmp_path / "evictions.json").write_text(content)
    warnings: list[str] = []

    assert Spool(tmp_path, max_bytes=10, warn=warnings.append).evictions() == (0, 0)
    assert len(warnings) == 1


def test_a_batch_json_cannot_encode_is_counted_as_evicted_not_raised(tmp_path):
    warnings: list[str] = []
    spool = Spool(tmp_path, max_bytes=10**9, warn=warnings.append)
    bad = batch(1)
    bad["samples"][0]["host"] = {"load1": object()}

    spool.append(bad)

    assert len(spool) == 0 and spool.evictions() == (1, 1)
    assert len(warnings) == 1 and "JSON" in warnings[0]


def test_a_file_deleted_by_hand_is_forgotten(tmp_path):
    spool = Spool(tmp_path, max_bytes=10**9)
    for seq in (1, 2):
        spool.append(batch(seq))
    (tmp_path / batch_files(tmp_path)[0]).unlink()

    assert seqs(spool) == [("boot-a", 2)]
    assert len(spool) == 1 and spool.bytes == (tmp_path / batch_files(tmp_path)[0]).stat().st_size


def bound_of(tmp_path, count: int) -> int:
    """The bytes of ``count`` one-sample batches, as the spool counts them."""
    measure = Spool(tmp_path / "measure", max_bytes=10**9)
    for seq in range(1, count + 1):
        measure.append(batch(seq))
    return measure.bytes


def test_a_batch_being_sent_is_not_evicted_the_oldest_idle_one_is(tmp_path):
    """The server may be storing what the sender peeked: evicting it would count a loss that
    is not one. The next oldest goes instead, and the counts stay exact."""
    spool = Spool(tmp_path / "spool", max_bytes=bound_of(tmp_path, 3))
    for seq in (1, 2, 3):
        spool.append(batch(seq))
    [sending] = spool.peek(max_batches=1)
    spool.append(batch(4))  # past the bound while batch 1 is in flight
    spool.remove([sending.name])  # the server stored it

    assert seqs(spool) == [("boot-a", 3), ("boot-a", 4)]
    assert spool.evictions() == (1, 1)  # batch 2, the one really lost


def test_a_group_that_failed_is_evictable_again_once_settled(tmp_path):
    spool = Spool(tmp_path / "spool", max_bytes=bound_of(tmp_path, 2))
    for seq in (1, 2):
        spool.append(batch(seq))
    spool.peek()
    spool.settle()  # the post failed: the sender waits with the group back in the spool
    spool.append(batch(3))

    assert seqs(spool) == [("boot-a", 2), ("boot-a", 3)]
    assert spool.evictions() == (1, 1)


def test_when_only_batches_being_sent_are_left_the_new_one_is_counted_as_evicted(tmp_path):
    spool = Spool(tmp_path / "spool", max_bytes=bound_of(tmp_path, 2))
    for seq in (1, 2):
        spool.append(batch(seq))
    sending = spool.peek()
    spool.append(batch(3))

    assert [s.name for s in spool.peek()] == [s.name for s in sending]
    assert spool.evictions() == (1, 1)
    assert spool.bytes <= spool.max_bytes
