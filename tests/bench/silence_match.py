"""Matching a pathological silence regex: Python's backtracking ``re`` against RE2, which
Pitwall uses (controlplane/alerts/patterns.py). Stdlib and re2 only: no database.

    python -m tests.bench.silence_match

Prints, per label length, the time of one match of ``(.|.)*!`` (never matching: the label has
no "!") with each engine, then RE2 over 1,000 alert labels of 200 and 4,000 characters.
Results also go to var/bench/silence_match.json.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from controlplane.alerts import patterns

PATTERN = "(.|.)*!"
ROOT = Path(__file__).resolve().parents[2]


def seconds(match, label: str, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        match(label)
    return (time.perf_counter() - start) / repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "var/bench/silence_match.json")
    args = parser.parse_args()
    backtracking = re.compile(PATTERN)
    rows = []
    print(f"pattern {PATTERN!r}, one label of n characters, no match")
    print(f"{'n':>4} {'Python re':>12} {'RE2':>10}")
    for n in (12, 16, 20, 22, 24):
        label = "g" * n
        py = seconds(backtracking.fullmatch, label, 1 if n >= 20 else 5)
        r2 = seconds(lambda text: patterns.fullmatch(PATTERN, text), label, 200)
        rows.append({"chars": n, "python_re_s": py, "re2_s": r2})
        print(f"{n:>4} {py * 1e3:>9.2f} ms {r2 * 1e3:>7.3f} ms")
    fleets = []
    for n in (200, 4000):
        labels = [f"gpu-node-{i:04d}-" + "x" * (n - 15) for i in range(1000)]
        start = time.perf_counter()
        for label in labels:
            patterns.fullmatch(PATTERN, label)
        took = time.perf_counter() - start
        fleets.append({"alerts": 1000, "chars": n, "re2_s": took})
        print(f"RE2, 1,000 labels of {n:,} characters: {took * 1e3:.1f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"pattern": PATTERN, "one_label": rows, "fleet": fleets},
                                   indent=2))


if __name__ == "__main__":
    main()
