"""The Hugging Face cache scan: real directories laid out as huggingface_hub lays them out."""

from __future__ import annotations

import os
from pathlib import Path

from agents.collectors.hf_cache import HfCache, ScanBudget, hub_cache_dir, repo_of, scan

GB = 10**9


def cached_model(root: Path, dirname: str, blobs: dict[str, int]) -> Path:
    """A repository as a download leaves it: blobs, and a snapshot linking to them. Sparse
    files: their size is what the scan reads, and they cost no disk."""
    repo = root / dirname
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for name, size in blobs.items():
        blob = repo / "blobs" / name
        with open(blob, "wb") as handle:
            handle.truncate(size)
        if not name.endswith(".incomplete"):
            os.symlink(blob, snapshot / f"{name}.safetensors")
    return repo


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_cache_dir_follows_huggingface_hubs_order(tmp_path):
    assert hub_cache_dir({"HF_HUB_CACHE": "/a", "HF_HOME": "/b"}) == Path("/a")
    assert hub_cache_dir({"HF_HOME": "/b"}) == Path("/b/hub")
    assert hub_cache_dir({}, home=tmp_path) == tmp_path / ".cache/huggingface/hub"


def test_directory_names_become_repository_ids():
    assert repo_of("models--meta-llama--Llama-3.1-8B-Instruct") == \
        "meta-llama/Llama-3.1-8B-Instruct"
    assert repo_of("models--gpt2") == "gpt2"
    assert repo_of("datasets--org--data") is None
    assert repo_of("models--a--b--c") is None  # not an id the Hub gives
    assert repo_of("models--org--na me") is None
    assert repo_of(".locks") is None


def test_a_models_size_is_its_complete_blobs(tmp_path):
    cached_model(tmp_path, "models--meta-llama--Llama-3.1-8B-Instruct",
                 {"a": 5 * GB, "b": 11 * GB, "c.incomplete": 7 * GB})
    cached_model(tmp_path, "models--gpt2", {"w": 500_000_000})
    cached_model(tmp_path, "models--org--downloading", {"x.incomplete": GB})
    (tmp_path / "models--org--empty").mkdir()
    (tmp_path / "datasets--org--data" / "blobs").mkdir(parents=True)
    (tmp_path / ".locks").mkdir()
    models, complete = scan(tmp_path, ScanBudget(10.0, Clock()))
    assert complete
    assert models == [{"repo": "gpt2", "bytes": 500_000_000},
                      {"repo": "meta-llama/Llama-3.1-8B-Instruct", "bytes": 16 * GB}]


def test_no_cache_directory_is_no_models(tmp_path):
    assert scan(tmp_path / "absent", ScanBudget(10.0, Clock())) == ([], True)


def test_the_scan_lists_at_most_the_bound(tmp_path):
    for i in range(5):
        cached_model(tmp_path, f"models--org--m{i}", {"w": 1})
    models, _ = scan(tmp_path, ScanBudget(10.0, Clock()), max_models=3)
    assert [m["repo"] for m in models] == ["org/m0", "org/m1", "org/m2"]


class SteppingClock(Clock):
    """Every reading advances: each check of the budget costs a second."""

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_scan_past_its_budget_stops_and_says_so(tmp_path):
    for i in range(10):
        cached_model(tmp_path, f"models--org--m{i}", {"w": 1})
    models, complete = scan(tmp_path, ScanBudget(4.0, SteppingClock()))
    assert not complete
    assert 0 < len(models) < 10


def test_the_cache_is_scanned_again_only_after_its_period(tmp_path):
    clock, warnings = Clock(), []
    cache = HfCache(tmp_path, warn=warnings.append, clock=clock, every_s=300.0)
    assert cache.models() == []
    cached_model(tmp_path, "models--org--new", {"w": 7})
    clock.now += 299.0
    assert cache.models() == []  # still the last scan's answer
    clock.now += 1.0
    assert cache.models() == [{"repo": "org/new", "bytes": 7}]
    assert warnings == []


def test_a_slow_scan_warns_once_and_lists_what_it_found(tmp_path):
    for i in range(10):
        cached_model(tmp_path, f"models--org--m{i}", {"w": 1})
    clock, warnings = SteppingClock(), []
    cache = HfCache(tmp_path, warn=warnings.append, clock=clock, every_s=0.0, budget_s=4.0)
    assert 0 < len(cache.models()) < 10
    cache.models()
    assert len(warnings) == 1 and "took over 4 s" in warnings[0]


def test_an_unreadable_cache_keeps_the_last_answer_and_warns(tmp_path):
    cached_model(tmp_path, "models--org--m", {"w": 3})
    clock, warnings = Clock(), []
    cache = HfCache(tmp_path, warn=warnings.append, clock=clock, every_s=1.0)
    assert cache.models() == [{"repo": "org/m", "bytes": 3}]
    cache.root = tmp_path / "a-file"
    cache.root.write_text("not a directory")
    clock.now += 1.0
    assert cache.models() == [{"repo": "org/m", "bytes": 3}]
    assert len(warnings) == 1 and "cannot read" in warnings[0]
