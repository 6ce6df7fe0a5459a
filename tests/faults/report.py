"""Writes the fault suite's figures (var/faults/results.json, one row per case, written by the
tests through ``harness.record``) into RELIABILITY.md's table, with the machine they ran on.

``python -m tests.faults.report`` (``make faults`` runs it after the suite, failed or not).
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import psutil

from tests.faults.harness import FLEET_SIZE, RESULTS
from tests.support.live import ROOT

PAGE = ROOT / "RELIABILITY.md"
BEGIN, END = "<!-- faults:begin -->", "<!-- faults:end -->"
HEADER = ("| case | injected | for | unit | expected | stored | lost | duplicated "
          "| time to recover | notes |\n|---|---|---|---|---|---|---|---|---|---|")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    memory = psutil.virtual_memory().total / 2**30
    return (f"{os.cpu_count()} cores ({cpu_model()}), {memory:.0f} GiB, "
            f"Python {platform.python_version()}, {platform.system()} {platform.release()}")


def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def row(result: dict) -> str:
    cells = [result["case"], result["injected"], seconds(result["duration_s"]), result["unit"],
             str(result["expected"]), str(result["stored"]), f"**{result['lost']}**",
             str(result["duplicated"]), seconds(result["recovery_s"]),
             result.get("notes", "").replace("|", "\\|")]
    return "| " + " | ".join(cells) + " |"


def table(results: list[dict]) -> str:
    results = sorted(results, key=lambda r: _case_order(r["case"]))
    runs = sorted({r["at"] for r in results})
    when = runs[0] if len(runs) == 1 else f"{runs[0]} to {runs[-1]}" if runs else "never"
    sizes = sorted({r.get("agents", FLEET_SIZE) for r in results if r["unit"] == "samples"})
    fleet = " or ".join(map(str, sizes)) or str(FLEET_SIZE)
    lines = [f"Run {when} on {machine()}; fleet: {fleet} simulated agents at 1 Hz unless a "
             f"case says otherwise. Reproduce: `make faults`.", "", HEADER,
             *(row(r) for r in results)]
    return "\n".join(lines)


def _case_order(case: str) -> tuple[int, str]:
    match = re.match(r"(\d+)", case)
    return (int(match[1]) if match else 99, case)


def write(page: Path = PAGE, results_file: Path = RESULTS) -> str:
    results = json.loads(results_file.read_text()) if results_file.exists() else []
    text = page.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{page} has no {BEGIN} … {END} section to fill")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = table(results) if results else f"No case ran ({time.strftime('%Y-%m-%d')})."
    page.write_text(f"{head}{BEGIN}\n{body}\n{END}{tail}")
    return body


if __name__ == "__main__":
    print(write())
    sys.exit(0)
