"""Print `vllm serve`'s real argument parser as JSON: run with the real vLLM's Python.

    <venv>/bin/python tests/real_vllm/dump_parser.py

One object per option string: dest, kind of action, type, nargs, choices. The real-vLLM test
compares Pitwall's argument catalog with it; `check` then feeds it argv to parse.
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


def main(argv: list[str]) -> int:
    parser = serve_parser()
    if argv and argv[0] == "check":
        # Parse a command line the way `vllm serve` would (argparse exits 2 on an error).
        args = parser.parse_args(["model", *json.loads(argv[1])])
        print(json.dumps({k: v for k, v in vars(args).items()
                          if isinstance(v, int | float | str | bool | list | type(None))},
                         default=str))
        return 0
    print(json.dumps({option: describe(action) for action in parser._actions
                      for option in action.option_strings}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
