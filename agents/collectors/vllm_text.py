"""A vLLM /metrics page -> the samples of the families we map, parsed by prometheus_client.

Only those families' lines are handed to the parser: on a vLLM 0.33 page that is 140 of 640
lines, and prometheus_client's pure-Python parser costs about 35 us a line, so parsing it all
would take 22 ms a scrape (40 ms with two data-parallel engines), the agent's whole CPU budget
at one scrape a second. Lines that look like nothing in the text format are parsed too, so
malformed text is still refused. Each family's block of lines is parsed once per distinct
text: an idle engine's page repeats itself, and a config block never changes.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from agents.collectors.vllm_names import SUSPECT_LINE, WANTED_LINE

Families = dict[str, list[Sample]]  # family name -> its samples
ParsedBlock = tuple[tuple[str, tuple[Sample, ...]], ...]
Memo = dict[str, ParsedBlock]  # a block's text -> its parse, for the blocks of one page

# What prometheus_client raises on bad input (mostly ValueError, sometimes without a message).
_PARSE_ERRORS = (ValueError, IndexError, KeyError)


class VllmMetricsError(Exception):
    """The /metrics text is not something we can read; the message says what and where."""


def parse_families(text: str, memo: Memo | None = None) -> Families:
    """The samples of every family vllm_names maps. `memo` (kept by the caller between
    scrapes) is left holding this page's blocks. Raises VllmMetricsError on malformed text."""
    _check_suspect_lines(text)
    previous = memo if memo is not None else {}
    current: Memo = {}
    families: Families = {}
    for lines in _blocks(WANTED_LINE.findall(text)):
        block = "\n".join(lines)
        parsed = current.get(block) or previous.get(block) or _parse_block(text, lines, block)
        current[block] = parsed
        for name, samples in parsed:
            families.setdefault(name, []).extend(samples)
    if memo is not None:
        memo.clear()
        memo.update(current)
    return families


def _blocks(lines: list[str]) -> list[list[str]]:
    # A family is its HELP/TYPE comment lines and the samples after them.
    blocks: list[list[str]] = []
    for line in lines:
        if not blocks or (line.startswith("#") and not blocks[-1][-1].startswith("#")):
            blocks.append([])
        blocks[-1].append(line)
    return blocks


def _parse_block(text: str, lines: list[str], block: str) -> ParsedBlock:
    try:
        return tuple((family.name, tuple(family.samples))
                     for family in text_string_to_metric_families(block))
    except _PARSE_ERRORS as exc:
        raise _locate(text, lines, exc) from exc


def _check_suspect_lines(text: str) -> None:
    for match in SUSPECT_LINE.finditer(text):
        line = match.group(0)
        try:
            _drain(text_string_to_metric_families(line))
        except _PARSE_ERRORS as exc:
            raise _error(text.count("\n", 0, match.start()) + 1, line, exc) from exc


def _locate(text: str, lines: list[str], exc: Exception) -> VllmMetricsError:
    # prometheus_client gives no line number: find the first line it refuses on its own.
    for line in lines:
        try:
            _drain(text_string_to_metric_families(line))
        except _PARSE_ERRORS as line_exc:
            return _error(text.count("\n", 0, text.find(line)) + 1, line, line_exc)
    return VllmMetricsError(f"malformed /metrics text: {exc or type(exc).__name__}")


def _error(number: int, line: str, exc: Exception) -> VllmMetricsError:
    shown = line.strip()
    detail = str(exc).replace(shown, "").strip(" :") or "not valid Prometheus text format"
    return VllmMetricsError(f"malformed /metrics text at line {number}: {detail}: {shown[:120]!r}")


def _drain(families: Iterable[Metric]) -> None:
    for _ in families:
        pass
