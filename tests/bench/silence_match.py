"""Matching a pathological silence regex: Python's backtracking ``re`` against RE2, which
Pitwall uses (controlplane/alerts/patterns.py). Stdlib and re2 only: no database.

    python -m tests.bench.silence_match

Prints, per label length, the time of one match of ``(.|.)*!`` (never matching: the label has
no "!") with each engine, then RE2 over 1,000 alert labels of 200 and 4,000 characters. Then
what one pass (the alert list, a dispatch) costs with many silences: matched alert by alert
from the regex text, as before, against compiled once per silence (silences.silence_of), as
now. Results also go to var/bench/silence_match.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

import django

from controlplane.alerts import patterns

# Django's settings (the bounds) and unsaved Silence rows: no database is opened.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("SECRET_KEY", "bench-silence-match-no-database")

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
    passes = pass_costs()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"pattern": PATTERN, "one_label": rows, "fleet": fleets,
                                    "passes": passes}, indent=2))


def stored_exploit():
    """One silence as the API took it before the bounds: 4,200 distinct regexes of about
    1,000 characters that all match a gpu-node-* host, then a matcher that never matches."""
    from controlplane.alerts.models import Silence

    def pattern(i: int) -> str:
        alts = "|".join(f"h{i}n{k:03d}[a-z]{{2,9}}" for k in range(60))
        return f"(?:gpu-node-.*|{alts})"[:1000].rsplit("|", 1)[0] + ")"

    return [Silence(id=1, matchers=[*({"label": "host", "op": "=~", "value": pattern(i)}
                                      for i in range(4200)),
                                    {"label": "alertname", "op": "=", "value": "never"}])]


def bounded_worst():
    """The worst the default bounds allow: 65,536 bytes of regexes, each counting at least
    64, so 1,024 regexes; 64 silences of 16 regexes, 15 matching every gpu-node-* host and
    the last never, so every regex is run for every alert and nothing is silenced."""
    from controlplane.alerts.models import Silence
    from controlplane.alerts.silences import check_own_bounds

    made = []
    for i in range(64):
        matchers = [*({"label": "host", "op": "=~", "value": f"gpu-node-.*|s{i}m{k}"}
                      for k in range(15)),
                    {"label": "host", "op": "=~", "value": f"never-{i}"}]
        check_own_bounds(matchers)
        made.append(Silence(id=i + 1, matchers=matchers))
    return made


def pass_costs() -> list[dict]:
    """One pass (each alert against every silence until one silences it): the regexes matched
    from their text alert by alert through patterns.py's cache (before), or compiled once per
    silence (now: cold caches, then the next pass, which reads the silences afresh)."""
    django.setup()
    from controlplane.alerts import silences

    out = []
    for name, build, counts in (("the exploit silence, stored before the bounds",
                                 stored_exploit, (1, 2)),
                                ("the worst the default bounds allow", bounded_worst,
                                 (1, 16, 256))):
        print(f"\n{name}: one pass")
        print(f"{'alerts':>6} {'before':>9} {'now, cold':>10} {'now, next pass':>15}")
        for alerts in counts:
            labels = [{"alertname": "KVCacheFull", "host": f"gpu-node-{n:03d}"}
                      for n in range(alerts)]
            patterns._compile.cache_clear()
            before = timed(per_alert, silences, build(), labels)
            patterns._compile.cache_clear()
            silences.COMPILED.clear()
            first, second = build(), build()  # built outside the timing
            cold = timed(compiled_once, silences, first, labels)
            warm = timed(compiled_once, silences, second, labels)
            out.append({"case": name, "alerts": alerts, "before_s": before,
                        "now_cold_s": cold, "now_warm_s": warm})
            print(f"{alerts:>6} {before:>7.3f} s {cold:>8.3f} s {warm:>13.3f} s")
    return out


def per_alert(silences, pool: list, labels: list[dict]) -> None:
    """Before: each alert matched from the regex text (patterns.py's cache holds 4,096)."""
    for one in labels:
        next((s for s in pool if silences.matches(s.matchers, one, on_refused=False)), None)


def compiled_once(silences, pool: list, labels: list[dict]) -> None:
    for one in labels:
        silences.silence_of(one, pool)


def timed(work, *args) -> float:
    start = time.perf_counter()
    work(*args)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
