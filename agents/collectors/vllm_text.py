"""A vLLM /metrics page -> the samples of the families we map, parsed by prometheus_client.

Only those families' lines are handed to the parser: on a vLLM 0.33 page that is 220 of 640
lines, and prometheus_client's pure-Python parser costs about 35 us a line, so parsing it all
would take 22 ms a scrape (40 ms with two data-parallel engines), the agent's whole CPU budget
at one scrape a second. Lines that look like nothing in the text format are parsed too, so
malformed text is still refused.

Under load nearly every family's values change every scrape, but its lines' names and labels
do not. So a family's block is remembered by its shape (HELP/TYPE lines and each sample
line's `name{labels}`), and a block whose shape was parsed before only has its values read,
the way prometheus_client reads them. A block with a new shape, or a line whose
`name{labels} value [timestamp]` split is not certain, goes through prometheus_client whole:
it stays the parser of record for names and labels. An unchanged block (an idle engine, a
config block) is reused as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from agents.collectors.vllm_names import SUSPECT_LINE, WANTED_LINE

Families = dict[str, list[Sample]]  # family name -> its samples
ParsedBlock = tuple[tuple[str, tuple[Sample, ...]], ...]
Shape = tuple[str, ...]  # a block's comment lines and its sample lines' `name{labels}`
Tokens = list[tuple[str, str | None]]  # each sample line's value and timestamp, as written
# For the blocks of one page: a block's text -> its parse and shape (None: not split), and
# a shape -> the parse that first had it (a template whose values are replaced).
Memo = dict[str | Shape, tuple[ParsedBlock, Shape | None]]

# What prometheus_client raises on bad input (mostly ValueError, sometimes without a message).
_PARSE_ERRORS = (ValueError, IndexError, KeyError)

# The only sample line shape read without the parser: `name value [timestamp]` or
# `name{label="value",...} value [timestamp]`, single spaces, quoted values with backslash
# escapes (a `}`, `,` or space inside quotes belongs to the value). The value and timestamp
# tokens never contain `}`, so the identity ends exactly where prometheus_client's label block
# does. Anything else (tabs, spaces in the label block, exemplars) takes the full parser.
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
_NUMBER = r"[0-9a-zA-Z.+-]+"  # digits, exponents, NaN, Inf: never `_`, `{`, `}` or a quote
_IDENTITY = rf"[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{{(?:{_LABEL}(?:,{_LABEL})*,?)?\}})?"
_SAMPLE_LINE = re.compile(rf"({_IDENTITY}) ({_NUMBER})(?: ({_NUMBER}))?")


class VllmMetricsError(Exception):
    """The /metrics text is not something we can read; the message says what and where."""


def parse_families(text: str, memo: Memo | None = None) -> Families:
    """The samples of every family vllm_names maps. `memo` (kept by the caller between
    scrapes) is left holding this page's blocks. Raises VllmMetricsError on malformed text."""
    _check_suspect_lines(text)
    previous = memo if memo is not None else {}
    current: Memo = {}
    families: Families = {}
    for lines in _blocks(WANTED_LINE.findall("\n" + text)):
        for name, samples in _read_block(text, lines, previous, current):
            families.setdefault(name, []).extend(samples)
    if memo is not None:
        memo.clear()
        memo.update(current)
    return families


def _read_block(text: str, lines: list[str], previous: Memo, current: Memo) -> ParsedBlock:
    block = "\n".join(lines)
    known = current.get(block) or previous.get(block)
    if known is not None:  # the very same text: nothing to read
        parsed, shape = known
    else:
        split = _split(lines)
        shape = None if split is None else split[0]
        parsed = None if split is None else _reread(split, current, previous)
        if parsed is None:
            parsed = _parse_block(text, lines, block)
            if split is not None and _fits(parsed, split[1]):
                current[split[0]] = (parsed, split[0])  # the template for this shape
    current[block] = (parsed, shape)
    if shape is not None and shape not in current and shape in previous:
        current[shape] = previous[shape]
    return parsed


def _reread(split: tuple[Shape, Tokens], current: Memo, previous: Memo) -> ParsedBlock | None:
    """The block from the template of its shape and its own values; None when no template."""
    shape, tokens = split
    template = current.get(shape) or previous.get(shape)
    if template is None:
        return None
    try:
        return _with_values(template[0], tokens)
    except ValueError:  # a value the parser may refuse: let it say why, naming the line
        return None


def _split(lines: list[str]) -> tuple[Shape, Tokens] | None:
    """The block's shape and its sample lines' value tokens; None when a line is not in the
    one shape read without the parser."""
    shape: list[str] = []
    tokens: Tokens = []
    for raw in lines:
        line = raw.strip()
        if line.startswith("#"):
            shape.append(line)
            continue
        match = _SAMPLE_LINE.fullmatch(line)
        if match is None:
            return None
        shape.append(match.group(1))
        tokens.append((match.group(2), match.group(3)))
    return tuple(shape), tokens


def _fits(parsed: ParsedBlock, tokens: Tokens) -> bool:
    # One sample a line, in line order, is what the text parser yields; anything else
    # (a parser that changed its ways) is not reused.
    return sum(len(samples) for _, samples in parsed) == len(tokens)


def _with_values(template: ParsedBlock, tokens: Tokens) -> ParsedBlock:
    values = iter(tokens)
    out = []
    for name, samples in template:
        fresh = []
        for sample in samples:
            value, stamp = next(values)
            fresh.append(Sample(sample.name, sample.labels, _number(value),
                                None if stamp is None else _number(stamp) / 1000,
                                sample.exemplar, sample.native_histogram))
        out.append((name, tuple(fresh)))
    return tuple(out)


def _number(token: str) -> float:
    # As prometheus_client reads a value: an int when int() takes it (so "3" is 3, not 3.0),
    # else float(), which takes NaN, +Inf, -Inf and the other spellings it takes. The split
    # lets through only ASCII letters, digits, `.`, `+` and `-`: int() takes exactly
    # [+-]digits of those. `_` never gets here (float() would take "1_0", the parser does not).
    digits = token[1:] if token[:1] in "+-" else token
    return int(token) if digits.isdigit() else float(token)


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
    for match in SUSPECT_LINE.finditer("\n" + text):
        line = match.group(1)
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
