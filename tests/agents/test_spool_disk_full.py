"""The spool on a disk that fills up: a real tmpfs of 256 KiB (mounted per test; we are root in
CI). The spool must not raise, must keep the newest batches that fit, count every batch it could
not keep as evicted (persisted for the next start) and recover when space returns."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.spool import Spool

TMPFS_BYTES = 256 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs",
                           str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root and CAP_SYS_ADMIN needed): "
                    f"{done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def batch(seq: int) -> dict:
    # Random hex does not compress below half: each file takes about 4 KiB on the tmpfs.
    return {"protocol": 1, "agent": {"version": "0.1.0", "boot_id": "boot-a", "seq": seq},
            "samples": [{"ts": 1000.0 + seq, "host": {"note": os.urandom(3000).hex()}}]}


def fill(directory: Path) -> Path:
    """Take every free block of the filesystem with one file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def seqs(spool: Spool) -> list[int]:
    return [s.batch["agent"]["seq"] for s in spool.peek(max_bytes=10**9)]


def test_a_full_disk_evicts_the_oldest_batches_counts_them_and_never_raises(small_disk):
    warnings: list[str] = []
    spool = Spool(small_disk / "spool", max_bytes=10**9, warn=warnings.append)  # disk-bound

    for seq in range(1, 201):
        spool.append(batch(seq))

    kept = seqs(spool)
    evicted = spool.evictions()
    assert 10 < len(kept) < 200  # the disk, not the bound, limited the spool
    assert kept == list(range(200 - len(kept) + 1, 201))  # the newest ones, in order
    assert evicted == (200 - len(kept), 200 - len(kept))  # every other batch is counted
    assert len([w for w in warnings if "is full" in w]) == 1  # said once, not per batch
    # The counts are on disk for the next start, written even though the disk is full.
    assert Spool(small_disk / "spool", max_bytes=10**9).evictions() == evicted
    assert not [n for n in os.listdir(small_disk / "spool") if n.startswith(".tmp-")]


def test_a_disk_filled_by_something_else_counts_each_new_batch_as_evicted(small_disk):
    warnings: list[str] = []
    spool = Spool(small_disk / "spool", max_bytes=10**9, warn=warnings.append)
    filler = fill(small_disk)

    for seq in range(1, 6):
        spool.append(batch(seq))

    assert len(spool) == 0 and spool.evictions() == (5, 5)
    [line] = warnings
    assert "cannot write to" in line and "No space left on device" in line
    # The counts file was made at start, so a full disk still updates it in place.
    assert json.loads((small_disk / "spool" / "evictions.json").read_text()) == \
        {"batches": 5, "samples": 5}

    filler.unlink()  # space returns
    for seq in range(6, 16):
        spool.append(batch(seq))

    assert seqs(spool) == list(range(6, 16))
    assert spool.evictions() == (5, 5)
    assert warnings[1:] == ["spool: recovered"]


def test_recovery_is_said_once_space_is_back_not_at_every_eviction(small_disk):
    warnings: list[str] = []
    spool = Spool(small_disk / "spool", max_bytes=10**9, warn=warnings.append)
    for seq in range(1, 101):  # full: each new batch evicts an old one
        spool.append(batch(seq))
    assert [w for w in warnings if "recovered" in w] == []

    for name in os.listdir(small_disk / "spool"):  # the operator makes room
        if name.endswith(".json.gz"):
            spool.remove([name])
    for seq in range(101, 121):
        spool.append(batch(seq))

    assert warnings.count("spool: recovered") == 1
    assert seqs(spool) == list(range(101, 121))
