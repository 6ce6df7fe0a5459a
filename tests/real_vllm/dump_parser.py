"""Print `vllm serve`'s real argument parser as JSON: run with the real vLLM's Python.

    <venv>/bin/python tests/real_vllm/dump_parser.py [ARGV_JSON ...]

One object per option string: dest, kind of action, type, nargs, choices (``options``). The
real-vLLM test compares Pitwall's argument catalog with it, and feeds it command lines to parse
(each a JSON list, ``parsed``).
"""

from __future__ import annotations

import argparse
import json
import sys


def serve_parser() -> argparse.ArgumentParser:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def type_name(convert: object) -> str | None:
    """The converter's name; vLLM's optional_type(int) is a closure: name what it wraps."""
    if convert is None:
        return None
    name = getattr(convert, "__name__", repr(convert))
    inner = [c.cell_contents for c in getattr(convert, "__closure__", None) or ()
             if callable(c.cell_contents)]
    return f"optional {type_name(inner[0])}" if name == "_optional_type" and inner else name


def describe(action: argparse.Action) -> dict:
    kind = type(action).__name__
    typ = type_name(action.type)
    choices = None if action.choices is None else [
        c if isinstance(c, int | float | str) else str(c) for c in action.choices]
    return {"dest": action.dest, "action": kind, "type": typ, "nargs": action.nargs,
            "choices": choices}


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> dict:
    """A command line parsed the way `vllm serve` would: its values, or argparse's exit code
    (2 on an error, whose message argparse prints to stderr)."""
    try:
        args = parser.parse_args(["model", *argv])
    except SystemExit as refused:
        return {"exit": refused.code}
    return {"values": {k: v for k, v in vars(args).items()
                       if isinstance(v, int | float | str | bool | list | type(None))}}


def main(argv: list[str]) -> int:
    """One object: ``options``, the parser's actions; ``parsed``, each command line given (a
    JSON list per argument) parsed by it. One run: each imports vLLM, seconds of CPU."""
    parser = serve_parser()
    print(json.dumps({
        "options": {option: describe(action) for action in parser._actions
                    for option in action.option_strings},
        # a parser of its own for each, as each `vllm serve` has
        "parsed": [parse(serve_parser(), json.loads(line)) for line in argv]}, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
