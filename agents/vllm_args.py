"""Validate a deployment's vLLM arguments for a given vLLM version and turn them into argv.

A deployment's desired config carries vLLM arguments as a JSON object keyed by argparse dest
name (``{"max_num_seqs": 256, "enable_prefix_caching": true}``) and a target vLLM version.
The control plane calls `validate` before storing or pushing a config, so a bad one is refused
with a message that names the fix; the agent calls `to_argv` to build the ``vllm serve``
command line and `from_argv` to read back what a running process was started with.

The per-version facts live in `agents.vllm_args_catalog` (its docstring says which vLLM
files and releases they were read from). Versions compare numerically, so any release in
between the ones examined gets the behaviour of the nearest older one, and a version newer
than the newest examined (`NEWEST_VERSION`) behaves as that one: `version_note` says so.
Release candidates and local builds (``0.12.0rc1``, ``0.11.0+cu128``) count as their
release, because a release candidate already carries the release's arguments.

Stdlib only: this runs on GPU hosts without Django.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from agents.vllm_args_catalog import (
    CATALOG,
    DEFAULT_VERSION,
    KNOWN_VERSIONS,
    LARGE_GPU_BYTES,
    LOADER_ENV,
    LOADER_ENV_PREFIXES,
    SERVE_BATCH_DEFAULTS,
    ArgSpec,
    BoolStyle,
)

__all__ = [
    "CATALOG", "DEFAULT_VERSION", "KNOWN_VERSIONS", "NEWEST_VERSION", "UNRECOGNIZED",
    "ArgError", "ArgSpec", "argv_problems", "available", "code_loading_args", "from_argv",
    "loader_env", "option_like", "parse_version", "serve_default", "to_argv", "validate",
    "version_note",
]

NEWEST_VERSION = KNOWN_VERSIONS[-1]
# from_argv puts the tokens it does not know under this key; no dest name starts with "_".
UNRECOGNIZED = "_unrecognized"

Version = tuple[int, int, int, int, int]
_VERSION_RE = re.compile(
    r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.?post(\d+))?"
    r"(?:\.?(?:rc|a|b|dev)\d*)*(?:\+[\w.]+)?"
)
_BOOL_WORDS = {"true": True, "false": False}
# vLLM parses these two with human_readable_int since 0.10.2 ("8k", "1M"); accept on read-back.
_HUMAN_INTS = {"max_model_len", "max_num_batched_tokens", "kv_cache_memory_bytes"}
_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
             "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class ArgError:
    arg: str
    message: str


def serve_default(name: str, gpu_mem_bytes: int | None = None, gpu_name: str = "") -> Any:
    """The value `vllm serve` uses for an argument it was not given, on a GPU of that memory
    and name (the scheduler budget depends on them; unknown: vLLM's fallback, the smaller
    budget). None where the catalog has no default (derived from the model, or unset)."""
    smaller = SERVE_BATCH_DEFAULTS[False]
    if name in smaller:
        large = (gpu_mem_bytes or 0) >= LARGE_GPU_BYTES and "a100" not in gpu_name.lower()
        return SERVE_BATCH_DEFAULTS[large][name]
    spec = CATALOG.get(name)
    return spec.default if spec else None


def parse_version(version: str) -> Version:
    """(major, minor, patch, fourth, post) of a vLLM version string; ValueError if not one."""
    match = _VERSION_RE.fullmatch(version.strip()) if isinstance(version, str) else None
    if match is None:
        raise ValueError(f"unparseable vLLM version {version!r}; expected e.g. {DEFAULT_VERSION}")
    return tuple(int(part or 0) for part in match.groups())  # type: ignore[return-value]


def version_note(version: str) -> str | None:
    """A line to show when `version` is newer than every release the catalog was read from."""
    if parse_version(version) <= parse_version(NEWEST_VERSION):
        return None
    return (f"vLLM {version} is newer than the newest version Pitwall knows ({NEWEST_VERSION});"
            f" its arguments are checked as {NEWEST_VERSION}'s")


def _step(steps: Sequence[tuple[str, Any]], version: Version) -> Any:
    """Value of the last (since, value) step at or before `version`."""
    current = steps[0][1]
    for since, value in steps:
        if parse_version(since) <= version:
            current = value
    return current


def _exists(spec: ArgSpec, version: Version) -> bool:
    if spec.added and version < parse_version(spec.added):
        return False
    return not (spec.removed and version >= parse_version(spec.removed))


def available(version: str) -> dict[str, ArgSpec]:
    """The catalog entries that exist in `version`, in catalog order."""
    parsed = parse_version(version)
    return {dest: spec for dest, spec in CATALOG.items() if _exists(spec, parsed)}


# --- validate ---------------------------------------------------------------------------


def validate(args: Mapping[str, Any], version: str) -> list[ArgError]:
    """Every problem with `args` for vLLM `version`; empty when the config can be started."""
    try:
        parsed = parse_version(version)
    except ValueError as exc:
        return [ArgError("version", str(exc))]
    errors: list[ArgError] = []
    for name, value in args.items():
        message = _check(name, value, parsed, version)
        if message:
            errors.append(ArgError(name, message))
    return errors


def _check(name: str, value: Any, parsed: Version, version: str) -> str | None:
    spec = CATALOG.get(name)
    if spec is None:
        return _unknown(name)
    if not _exists(spec, parsed):
        return f"{name}: {_absence(spec, version, parsed)}"
    problem = _type_problem(spec, value) or _value_problem(spec, value, parsed, version)
    return f"{name}: {problem}" if problem else None


def _unknown(name: str) -> str:
    close = difflib.get_close_matches(str(name), CATALOG, n=1)
    if close:
        return f"unknown argument {name!r} (did you mean {close[0]}?)"
    return f"unknown argument {name!r}; docs/vllm-args.md lists the arguments Pitwall accepts"


def _absence(spec: ArgSpec, version: str, parsed: Version) -> str:
    if spec.added and parsed < parse_version(spec.added):
        return (f"{spec.flag} does not exist in vLLM {version} (added in {spec.added}); "
                f"upgrade vLLM or remove it")
    hint = spec.removal_hint or "remove it"
    return f"{spec.flag} does not exist in vLLM {version} (removed in {spec.removed}); {hint}"


def _type_problem(spec: ArgSpec, value: Any) -> str | None:
    """Refuse JSON values of the wrong type; bool is an int subclass, so exclude it by hand."""
    got = f"got {type(value).__name__} {value!r}"
    if spec.kind == "bool":
        return None if isinstance(value, bool) else f"must be true or false, {got}"
    if spec.kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        return f"must be an integer, {got}"
    if spec.kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, {got}"
        return None if math.isfinite(value) else f"must be a finite number, {got}"
    if spec.kind in ("str", "choice"):
        ok = isinstance(value, str) and value.strip()
        return _text_problem(value) if ok else f"must be a non-empty string, {got}"
    if spec.kind == "strs":
        return _strs_problem(value, got)
    return None


def _strs_problem(value: Any, got: str) -> str | None:
    items = [value] if isinstance(value, str) else value
    if isinstance(items, list) and items and all(isinstance(i, str) and i.strip() for i in items):
        return next(filter(None, map(_text_problem, items)), None)
    return f"must be a non-empty string or list of non-empty strings, {got}"


def option_like(text: str) -> bool:
    """Whether vLLM's argparse (or any getopt-style reader) would take `text` as an option."""
    return text.startswith("-")


def _text_problem(text: str) -> str | None:
    """A string value is one argv token: it must not read as an option, nor hold a NUL (exec
    refuses those)."""
    if option_like(text):
        return (f"{text!r} would be read as an option (it starts with '-'), not as this "
                "argument's value; values may not start with '-'")
    if "\x00" in text:
        return f"{text!r} holds a NUL character"
    return None


def _value_problem(spec: ArgSpec, value: Any, parsed: Version, version: str) -> str | None:
    if spec.kind in ("bool", "strs", "str"):
        return None
    choices = _step(spec.choices, parsed) if spec.choices else None
    if choices is not None:
        return None if value in choices else _not_a_choice(spec, value, parsed, version)
    return _bounds_problem(spec, value, parsed)


def _not_a_choice(spec: ArgSpec, value: Any, parsed: Version, version: str) -> str:
    later = next((since for since, vals in spec.choices
                  if vals and value in vals and parse_version(since) > parsed), None)
    when = f" (it arrives in {later})" if later else ""
    listed = ", ".join(str(c) for c in _step(spec.choices, parsed))
    return f"{value!r} is not a choice in vLLM {version}{when}; choose one of: {listed}"


def _bounds_problem(spec: ArgSpec, value: float, parsed: Version) -> str | None:
    if spec.sentinel and value == spec.sentinel[0] and parsed >= parse_version(spec.sentinel[1]):
        return None
    ok = ((spec.gt is None or value > spec.gt) and (spec.ge is None or value >= spec.ge)
          and (spec.le is None or value <= spec.le))
    if ok:
        return None
    parts = [f"> {spec.gt:g}" if spec.gt is not None else "",
             f">= {spec.ge:g}" if spec.ge is not None else "",
             f"<= {spec.le:g}" if spec.le is not None else ""]
    rule = " and ".join(p for p in parts if p)
    extra = ""
    if spec.sentinel and parsed >= parse_version(spec.sentinel[1]):
        extra = f" (or {spec.sentinel[0]}: {spec.sentinel[2]})"
    return f"must be {rule}{extra}, got {value!r}"


# --- to_argv ----------------------------------------------------------------------------


def to_argv(args: Mapping[str, Any], version: str) -> list[str]:
    """The ``vllm serve`` flags for `args`, in catalog order; ValueError if `validate` objects.

    A False for an argument that version only has as a plain switch (``store_true``) is
    vLLM's default and is written as nothing, so it does not come back from `from_argv`.
    """
    errors = validate(args, version)
    if errors:
        raise ValueError("; ".join(error.message for error in errors))
    parsed = parse_version(version)
    argv: list[str] = []
    for dest, spec in CATALOG.items():
        if dest in args:
            argv.extend(_flag_tokens(spec, args[dest], parsed))
    return argv


def _flag_tokens(spec: ArgSpec, value: Any, parsed: Version) -> list[str]:
    if spec.kind == "bool":
        return _bool_tokens(spec.flag, value, _step(spec.bool_style, parsed))
    if spec.kind == "strs":
        return [spec.flag, *([value] if isinstance(value, str) else value)]
    return [spec.flag, str(value)]


def _bool_tokens(flag: str, value: bool, style: BoolStyle) -> list[str]:
    if style == "optional":
        return [flag if value else "--no-" + flag[2:]]
    if style == "store_bool":
        return [flag if value else f"{flag}=False"]
    return [flag] if value else []


# --- from_argv --------------------------------------------------------------------------


def from_argv(argv: Sequence[str], version: str) -> dict[str, Any]:
    """Read back the catalog arguments in `argv` (the ``vllm serve`` command line).

    Returns ``{dest: value}``. Tokens it does not know (the program, ``serve``, the model,
    ``--port 8000``, a flag this version lacks) are kept, in order, as a list under the
    `UNRECOGNIZED` key, present only when there are any. Raises ValueError for a bad version.
    """
    flags = _flag_table(parse_version(version))
    result: dict[str, Any] = {}
    leftover: list[str] = []
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        i = _read_one(tokens, i, flags, result, leftover)
    if leftover:
        result[UNRECOGNIZED] = leftover
    return result


class _Flag(NamedTuple):
    spec: ArgSpec
    negated: bool  # the --no- spelling
    style: BoolStyle | None


def _flag_table(parsed: Version) -> dict[str, _Flag]:
    """Every spelling of every flag one version accepts."""
    table: dict[str, _Flag] = {}
    for spec in CATALOG.values():
        if not _exists(spec, parsed):
            continue
        style = _step(spec.bool_style, parsed) if spec.kind == "bool" else None
        for spelling in (spec.flag, *spec.aliases):
            table[spelling] = _Flag(spec, False, style)
        if style == "optional":
            table["--no-" + spec.flag[2:]] = _Flag(spec, True, style)
    return table


def _read_one(tokens: list[str], i: int, flags: dict[str, _Flag],
              result: dict[str, Any], leftover: list[str]) -> int:
    """Consume the flag at `i` (and its values); return the index after it."""
    name, eq, inline = tokens[i].partition("=")
    found = flags.get(name) if name.startswith("-") else None
    if found is None:
        leftover.append(tokens[i])
        return i + 1
    spec = found.spec
    if spec.kind == "bool":
        return _read_bool(tokens, i, found, inline if eq else None, result, leftover)
    values = [inline] if eq else _following(tokens, i + 1, many=spec.kind == "strs")
    converted = _convert(spec, values)
    if converted is None:
        leftover.extend(tokens[i:i + 1 + (0 if eq else len(values))])
    else:
        result[spec.dest] = converted
    return i + 1 + (0 if eq else len(values))


def _read_bool(tokens: list[str], i: int, flag: _Flag, inline: str | None,
               result: dict[str, Any], leftover: list[str]) -> int:
    # StoreBoolean (old --enable-chunked-prefill) also takes a separate "True"/"False".
    nxt = tokens[i + 1].lower() if i + 1 < len(tokens) else ""
    if flag.style == "store_bool" and inline is None and nxt in _BOOL_WORDS:
        result[flag.spec.dest] = _BOOL_WORDS[nxt]
        return i + 2
    if inline is not None and inline.lower() not in _BOOL_WORDS:
        leftover.append(tokens[i])
        return i + 1
    value = _BOOL_WORDS[inline.lower()] if inline is not None else True
    result[flag.spec.dest] = value != flag.negated
    return i + 1


def _following(tokens: list[str], start: int, *, many: bool) -> list[str]:
    """The value tokens after a flag: one, or (nargs="+") all up to the next flag."""
    values: list[str] = []
    for token in tokens[start:]:
        if token.startswith("-") and not _is_number(token):
            break
        values.append(token)
        if not many:
            break
    return values


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _convert(spec: ArgSpec, values: list[str]) -> Any:
    """The typed value of a flag's tokens, or None when they do not parse."""
    if not values:
        return None
    if spec.kind == "strs":
        return values[0] if len(values) == 1 else values
    raw = values[0]
    try:
        if spec.kind == "int":
            return _parse_int(raw, human=spec.dest in _HUMAN_INTS)
        if spec.kind == "float":
            return float(raw)
    except ValueError:
        return None
    return raw


def _parse_int(raw: str, *, human: bool) -> int:
    if human and raw.strip().lower() == "auto":
        return -1
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", raw.strip()) if human else None
    if match:
        return int(float(match.group(1)) * _SUFFIXES[match.group(2)])
    return int(raw)


# --- what a command line or a config would make vLLM load ---------------------------------


def argv_problems(argv: Sequence[str], version: str) -> list[str]:
    """Why `argv` (the flags a control plane rendered) is not one `to_argv` could have made for
    `version`: a token the catalog does not read (an unknown flag, a stray value) or a value
    `validate` refuses (one that reads as an option). Empty when it is. The agent checks the
    flags it is given with this, so an older control plane cannot pass an option through."""
    try:
        parse_version(version)
    except ValueError as exc:
        return [str(exc)]
    read = from_argv(argv, version)
    problems = [f"{token!r} is not an argument Pitwall renders for vLLM {version}"
                for token in read.pop(UNRECOGNIZED, [])]
    return problems + [error.message for error in validate(read, version)]


def code_loading_args(args: Mapping[str, Any]) -> list[str]:
    """The arguments in `args` that make vLLM import or run code the config chooses (a boolean
    one only when true), in catalog order."""
    return [dest for dest, spec in CATALOG.items()
            if spec.loads_code and dest in args and args[dest] is not False]


def loader_env(env: Mapping[str, Any]) -> list[str]:
    """The names in `env` that make a process load code they name (the catalog's LOADER_ENV
    and LOADER_ENV_PREFIXES), sorted."""
    return sorted(name for name in env if isinstance(name, str) and (
        name in LOADER_ENV or name.startswith(LOADER_ENV_PREFIXES)))
