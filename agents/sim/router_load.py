"""Steady client load on an OpenAI-compatible endpoint (a service's router), and what the
clients saw: every request that failed or was refused is counted, none is retried.

    python -m agents.sim.router_load --url http://127.0.0.1:9100 --model M --rate 4

Arrivals are Poisson at ``--rate`` per second with at most ``--clients`` in flight (an arrival
beyond that waits for a slot: the load a saturated service sees, not an unbounded pile). A
line of totals goes to stdout every ``--report-s`` seconds: what `make run`'s demo logs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

TIMEOUT_S = 300.0


class RouterLoad:
    def __init__(self, url: str, model: str, rate: float, clients: int,
                 max_tokens: int = 64, seed: int = 1) -> None:
        self.url = url.rstrip("/") + "/v1/completions"
        self.model, self.rate, self.max_tokens = model, rate, max_tokens
        self.outcomes: Counter[str] = Counter()
        self._slots = threading.BoundedSemaphore(clients)
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def run(self, report_s: float = 30.0) -> None:
        next_report = time.monotonic() + report_s
        while not self._stop.is_set():
            self._stop.wait(self._random.expovariate(self.rate))
            self._slots.acquire()
            threading.Thread(target=self._one, daemon=True).start()
            if time.monotonic() >= next_report:
                next_report += report_s
                print(f"router load: {self.totals()}", flush=True)

    def stop(self) -> None:
        self._stop.set()

    def totals(self) -> dict[str, int]:
        with self._lock:
            return dict(self.outcomes)

    def _one(self) -> None:
        try:
            outcome = self._post()
        finally:
            self._slots.release()
        with self._lock:
            self.outcomes[outcome] += 1

    def _post(self) -> str:
        body = json.dumps({"model": self.model, "prompt": "the pit wall calls " * 8,
                           "max_tokens": self.max_tokens}).encode()
        request = urllib.request.Request(self.url, body,
                                         {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
                reply.read()
                return "ok"
        except urllib.error.HTTPError as exc:
            return f"http_{exc.code}"
        except (urllib.error.URLError, OSError):
            return "unreachable"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--rate", type=float, default=4.0, help="requests per second")
    parser.add_argument("--clients", type=int, default=32, help="at most this many in flight")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--report-s", type=float, default=30.0)
    args = parser.parse_args(argv)
    load = RouterLoad(args.url, args.model, args.rate, args.clients, args.max_tokens)
    try:
        load.run(args.report_s)
    except KeyboardInterrupt:
        load.stop()
    print(f"router load: {load.totals()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
