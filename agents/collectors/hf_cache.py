"""The models in this host's Hugging Face cache: placement prefers a host that has the weights.

The hub cache holds one directory per repository, ``models--org--name``, whose ``blobs/`` are
the downloaded files (``snapshots/`` only links to them): a model's size is its blobs' sizes.
A download still running leaves ``*.incomplete`` blobs; they do not count, and a model with no
complete blob is not listed.

A cache can hold thousands of files on a slow disk, so a scan is bounded (MAX_HF_MODELS, a
time budget) and kept for RESCAN_EVERY_S: the host inventory asks every minute.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agents.collectors.base import Warn, WarnOnce, stderr_warn
from agents.collectors.placement_facts import HF_REPO, MAX_HF_MODELS, MAX_MODEL_BYTES

RESCAN_EVERY_S = 300.0
SCAN_BUDGET_S = 2.0
PREFIX = "models--"


def hub_cache_dir(env: Mapping[str, str] = os.environ, home: Path | None = None) -> Path:
    """HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub (huggingface_hub's order)."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    return (home or Path.home()) / ".cache" / "huggingface" / "hub"


def repo_of(dirname: str) -> str | None:
    """"models--meta-llama--Llama-3.1-8B" -> "meta-llama/Llama-3.1-8B"; None for anything else
    (datasets, spaces, names the Hub would not give)."""
    if not dirname.startswith(PREFIX):
        return None
    repo = dirname[len(PREFIX):].replace("--", "/")
    return repo if HF_REPO.fullmatch(repo) else None


class ScanBudget:
    """Time left for one scan; the scan stops where it is once it is spent."""

    def __init__(self, seconds: float, clock: Callable[[], float]) -> None:
        self._deadline, self._clock = clock() + seconds, clock

    @property
    def spent(self) -> bool:
        return self._clock() >= self._deadline


def scan(root: Path, budget: ScanBudget, max_models: int = MAX_HF_MODELS,
         ) -> tuple[list[dict[str, Any]], bool]:
    """([{"repo", "bytes"}...] sorted by repo, complete): False when the budget ran out."""
    try:
        with os.scandir(root) as entries:
            names = sorted(entry.name for entry in entries if entry.is_dir())
    except FileNotFoundError:
        return [], True  # no cache on this host: nothing cached, and that is the whole truth
    models = []
    for name in names:
        if len(models) >= max_models:
            break
        repo = repo_of(name)
        if repo is None:
            continue
        if budget.spent:
            return models, False
        size = _blob_bytes(root / name / "blobs", budget)
        if size:
            models.append({"repo": repo, "bytes": min(size, MAX_MODEL_BYTES)})
    return models, not budget.spent


def _blob_bytes(blobs: Path, budget: ScanBudget) -> int:
    total = 0
    try:
        with os.scandir(blobs) as entries:
            for entry in entries:
                if entry.name.endswith(".incomplete") or not entry.is_file():
                    continue
                total += entry.stat().st_size
                if budget.spent:
                    break
    except OSError:
        return 0  # no blobs (a repository with nothing downloaded), or unreadable
    return total


class HfCache:
    """The cached models, scanned at most every RESCAN_EVERY_S."""

    def __init__(self, root: Path | None = None, warn: Warn = stderr_warn,
                 clock: Callable[[], float] = time.monotonic,
                 every_s: float = RESCAN_EVERY_S, budget_s: float = SCAN_BUDGET_S) -> None:
        self.root = root if root is not None else hub_cache_dir()
        self._warn = WarnOnce(warn)
        self._clock, self._every_s, self._budget_s = clock, every_s, budget_s
        self._models: list[dict[str, Any]] = []
        self._scanned_at: float | None = None

    def models(self) -> list[dict[str, Any]]:
        now = self._clock()
        if self._scanned_at is None or now - self._scanned_at >= self._every_s:
            self._models = self._scan()
            self._scanned_at = now
        return [dict(model) for model in self._models]

    def _scan(self) -> list[dict[str, Any]]:
        try:
            models, complete = scan(self.root, ScanBudget(self._budget_s, self._clock))
        except OSError as exc:
            self._warn.fail("hf cache", f"cannot read {self.root}: {exc.strerror or exc}")
            return self._models  # keep what the last good scan found
        if complete:
            self._warn.ok("hf cache")
        else:
            self._warn.fail("hf cache", f"scanning {self.root} took over {self._budget_s:g} s: "
                                        f"{len(models)} models listed, the rest left out")
        return models
