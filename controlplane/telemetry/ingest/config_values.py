"""The free-form parts of an inventory (an engine's ``config``, a GPU's ``mig``), checked for
numbers the rest of Pitwall cannot use.

Why: these objects are stored as the agent sent them and read later where a number is cast
or compared: an alert rule casts ``config->>'gpu_memory_utilization'`` to float8, where a
400-digit number (or the string of one) overflows and fails the rule for every host; tuning
converts ``config["args"]`` values with ``int()``/``float()``. So, at ingest:
- every number, and every string spelled as a number, is finite and at most 2**53 in
  magnitude (exact in a float8 and in a browser);
- a vLLM argument the catalog knows as numeric (at the top or under ``args``) is a number, or
  a string of one, within the catalog's bounds (``None``/empty: unset, as vLLM's labels say);
- nesting is at most MAX_DEPTH deep and an object holds at most MAX_KEYS keys.
"""

from __future__ import annotations

import math
import re

from agents.vllm_args_catalog import CATALOG, ArgSpec
from controlplane.telemetry.ingest.errors import BadRequest, join

NUMBER_LIMIT = 2.0**53
MAX_DEPTH = 8
MAX_KEYS = 512
UNSET = ("", "None")
# How JSON, Python and PostgreSQL spell a number in text (float8 accepts each of these).
NUMERIC_TEXT = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")


def check_config(config: dict, path: str) -> None:
    """An engine's config: the catalog's numeric arguments in range, every number sane."""
    check_values(config, path)
    for key, value in _arguments(config, path):
        spec = CATALOG.get(key[1])
        if spec is not None and spec.kind in ("int", "float"):
            _check_argument(spec, value, key[0])


def check_values(value: object, path: str, depth: int = 0) -> None:
    """Every number and numeric string under ``value`` finite and at most 2**53."""
    if depth > MAX_DEPTH:
        raise BadRequest(f"nests deeper than {MAX_DEPTH} levels", path)
    if isinstance(value, dict):
        if len(value) > MAX_KEYS:
            raise BadRequest(f"holds more than {MAX_KEYS} keys", path)
        for key, item in value.items():
            check_values(item, join(path, str(key)[:100]), depth + 1)
    elif isinstance(value, list):
        if len(value) > MAX_KEYS:
            raise BadRequest(f"holds more than {MAX_KEYS} values", path)
        for i, item in enumerate(value):
            check_values(item, f"{path}[{i}]", depth + 1)
    elif isinstance(value, str):
        if NUMERIC_TEXT.match(value):
            _sane(float(value), path)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _sane(value, path)


def _sane(value: float, path: str) -> None:
    try:
        ok = math.isfinite(value) and abs(value) <= NUMBER_LIMIT
    except OverflowError:  # an int too large for a float
        ok = False
    if not ok:
        raise BadRequest(f"{str(value)[:40]} is not a finite number of at most 2**53 in "
                         "magnitude", path)


def _arguments(config: dict, path: str):
    """(field path, key) and value of each top-level and ``args`` entry."""
    for key, value in config.items():
        yield (join(path, key), key), value
    args = config.get("args")
    if isinstance(args, dict):
        for key, value in args.items():
            yield (join(join(path, "args"), key), key), value


def _check_argument(spec: ArgSpec, value: object, path: str) -> None:
    if value is None or value in UNSET:
        return
    number = _as_number(value)
    if number is None or spec.kind == "int" and number != int(number):
        raise BadRequest(f"{spec.dest} must be {'an integer' if spec.kind == 'int' else 'a number'}"
                         f", got {str(value)[:40]!r}", path)
    if spec.sentinel is not None and number == spec.sentinel[0]:
        return
    if (spec.gt is not None and not number > spec.gt
            or spec.ge is not None and not number >= spec.ge
            or spec.le is not None and not number <= spec.le):
        raise BadRequest(f"{spec.dest} is {number:g}, outside {_bounds(spec)}", path)


def _as_number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and NUMERIC_TEXT.match(value):
        return float(value)
    return None


def _bounds(spec: ArgSpec) -> str:
    low = f"> {spec.gt:g}" if spec.gt is not None else f">= {spec.ge:g}" \
        if spec.ge is not None else ""
    high = f"<= {spec.le:g}" if spec.le is not None else ""
    return " and ".join(part for part in (low, high) if part) or "its range"
