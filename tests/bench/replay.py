"""Spool replay benchmark: an agent's on-disk backlog drained into a real server and PostgreSQL.

    make bench-replay                                   # 20,000 one-sample batches, 1 worker
    python -m tests.bench.replay --workers 1 2 --profile

The spool is built once with the real ``agents.spool.Spool`` (one gzip file per batch: 8 GPUs,
one engine with 4 histograms, the host, 2 processes; the first batch carries the inventory),
then copied afresh for each run. Each run gets a fresh bench database and replays the whole
spool with the real ``Shipper``/``IngestClient`` (multi-batch requests, as the agent's sender
thread does on recovery: ``step()`` until the spool is empty). Wall time runs from the first
request to the empty spool. With --profile a second run per worker count samples the server
processes and this client with py-spy and reports where their time goes. With --ceiling the
server is also fed prepared request bodies (no spool, no agent code; one in-order stream per
worker, as several agents replaying at once would be): what the server and PostgreSQL can take.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import psutil

from tests.bench import harness, loadgen

HOSTNAME = "bench-replay-00"
TARGET_GPU_ROWS_PER_S = 100_000
SPOOL_BOUND = 2**34  # nothing may be evicted while building


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1],
                        help="uvicorn worker counts to try, one run each")
    parser.add_argument("--profile", action="store_true",
                        help="after each measured run, a profiled one (py-spy)")
    parser.add_argument("--ceiling", action="store_true",
                        help="also the server's own ceiling: prepared request bodies sent by "
                             "one thread per stream (as many streams as workers), no spool")
    parser.add_argument("--port", type=int, default=18767)
    parser.add_argument("--dir", type=Path, default=harness.ROOT / "var" / "bench" / "replay",
                        help="where the spools are built (removed at the end)")
    parser.add_argument("--out", type=Path,
                        default=harness.ROOT / "var" / "bench" / "replay.json")
    return parser.parse_args(argv)


def build_spool(directory: Path, batches: int, gpus: int) -> dict:
    """``batches`` one-sample batches through Spool.append, timestamps ending now."""
    from agents.batch import BatchBuilder
    from agents.spool import Spool

    shutil.rmtree(directory, ignore_errors=True)
    spool = Spool(directory, SPOOL_BOUND)
    builder = BatchBuilder()
    inventory = loadgen.inventory(HOSTNAME, gpus)
    first_ts = round(time.time()) - batches
    started = time.monotonic()
    for i in range(batches):
        sample = loadgen.sample_template(HOSTNAME, gpus) | {"ts": float(first_ts + i)}
        spool.append(builder.build([sample], inventory))
    assert len(spool) == batches and spool.evictions() == (0, 0)
    return {"build_s": round(time.monotonic() - started, 1),
            "spool_bytes": spool.bytes, "boot_id": builder.boot_id}


class Meters:
    """CPU of the server tree, PostgreSQL and this process; the client's split by phase."""

    def __init__(self, server_pid: int) -> None:
        self.meters = {"server": harness.CpuMeter(lambda: harness.process_tree(server_pid)),
                       "postgres": harness.CpuMeter(harness.postgres_processes),
                       "client": harness.CpuMeter(lambda: [psutil.Process()])}

    def start(self) -> None:
        for meter in self.meters.values():
            meter.start()

    def stop(self) -> dict[str, float]:
        return {name: round(meter.stop(), 2) for name, meter in self.meters.items()}


def timed(totals: dict[str, float], key: str, fn):
    """``fn`` with its CPU time (this thread) added to ``totals[key]``."""
    def wrapper(*args, **kwargs):
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[key] = totals.get(key, 0.0) + time.thread_time() - started
    return wrapper


def replay(spool_dir: Path, server_url: str, token: str) -> dict:
    """Drain the spool with the agent's own sender code; requests, replies and client CPU."""
    from agents.spool import Spool
    from agents.transport import IngestClient, Shipper

    spool = Spool(spool_dir, SPOOL_BOUND)
    client = IngestClient(server_url, token, timeout=120)
    shipper = Shipper(client, spool, warn=lambda m: print(f"replay: warning: {m}",
                                                          file=sys.stderr))
    cpu: dict[str, float] = {}
    statuses: dict[int, int] = {}
    latencies: list[float] = []
    post = client.post

    def counted(payload):
        started = time.monotonic()
        reply = post(payload)
        latencies.append(time.monotonic() - started)
        statuses[reply.status] = statuses.get(reply.status, 0) + 1
        return reply

    client.post = timed(cpu, "post (encode, gzip, HTTP)", counted)
    spool.peek = timed(cpu, "spool.peek (read, gunzip, parse)", spool.peek)
    spool.remove = timed(cpu, "spool.remove (unlink)", spool.remove)
    total_cpu = time.thread_time()
    started = time.monotonic()
    while len(spool) and not (set(statuses) - {200}):
        shipper.step()
    wall = time.monotonic() - started
    cpu["all of step()"] = time.thread_time() - total_cpu
    client.close()
    return {"wall_s": wall, "requests": sum(statuses.values()), "statuses": statuses,
            "left_in_spool": len(spool), "delivered_batches": shipper.delivered_batches,
            "latencies": latencies, "client_cpu_by_phase_s": {k: round(v, 2)
                                                              for k, v in cpu.items()}}


def ceiling_bodies(hostname: str, batches: int, gpus: int) -> list[bytes]:
    """One stream's replay requests as the agent would send them, gzipped ahead of time."""
    import gzip

    from agents.batch import BatchBuilder
    from agents.spool import REPLAY_MAX_BATCHES, encode

    builder, inventory = BatchBuilder(), loadgen.inventory(hostname, gpus)
    first_ts = round(time.time()) - batches
    group, bodies = [], []
    for i in range(batches):
        sample = loadgen.sample_template(hostname, gpus) | {"ts": float(first_ts + i)}
        group.append(builder.build([sample], inventory))
        if len(group) == REPLAY_MAX_BATCHES or i == batches - 1:
            payload = {"protocol": 1, "batches": group}
            bodies.append(gzip.compress(encode(payload), compresslevel=5, mtime=0))
            group = []
    return bodies


def send_stream(port: int, token: str, bodies: list[bytes], statuses: list[int]) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip",
               "Authorization": f"Bearer {token}"}
    for body in bodies:
        conn.request("POST", "/api/v1/ingest", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        statuses.append(response.status)
    conn.close()


def ceiling_run(args, workers: int) -> dict:
    """The server and PostgreSQL alone: prepared bodies, one in-order stream per worker."""
    import threading

    env = harness.bench_env()
    harness.fresh_database(env)
    streams = max(1, workers)
    per_stream = args.batches // streams
    hosts = [f"bench-ceiling-{i:02d}" for i in range(streams)]
    tokens = [harness.create_agent_token(h) for h in hosts]
    bodies = [ceiling_bodies(h, per_stream, args.gpus) for h in hosts]
    statuses: list[int] = []
    with harness.server(env, args.port, workers) as proc:
        meters = Meters(proc.pid)
        threads = [threading.Thread(target=send_stream, args=(args.port, t, b, statuses))
                   for t, b in zip(tokens, bodies, strict=True)]
        meters.start()
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        cpu = meters.stop()
    rows = harness.count_samples("gpu")
    return {"mode": "server ceiling (prepared bodies, no agent code)", "workers": workers,
            "streams": streams, "batches": per_stream * streams, "wall_s": round(wall, 2),
            "gpu_rows_stored": rows, "gpu_rows_expected": per_stream * streams * args.gpus,
            "gpu_rows_per_s": round(rows / wall), "requests": len(statuses),
            "non_200": sum(1 for s in statuses if s != 200), "cpu_s": cpu,
            "cores_busy": {k: round(v / wall, 2) for k, v in cpu.items()},
            "cpu_us_per_gpu_row": {k: round(1e6 * v / max(1, rows), 2) for k, v in cpu.items()}}


def one_run(args, pristine: Path, workers: int, profile: bool) -> dict:
    env = harness.bench_env()
    harness.fresh_database(env)
    token = harness.create_agent_token(HOSTNAME)
    work = args.dir / "work"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine, work)
    with harness.server(env, args.port, workers) as proc:
        meters = Meters(proc.pid)
        where = args.out.parent / f"replay-profile-w{workers}"
        spies = start_profiles(where, proc.pid) if profile else []
        meters.start()
        result = replay(work, f"http://127.0.0.1:{args.port}", token)
        cpu = meters.stop()
        for spy, _ in spies:
            harness.profile_stop(spy)
    shutil.rmtree(work, ignore_errors=True)
    gpu_rows = harness.count_samples("gpu")
    report = summarise(args, workers, result, cpu, gpu_rows)
    if profile:
        report["profile"] = {
            "server": harness.fold_profile([out for _, out in spies[:-1]]),
            "client": harness.fold_profile([spies[-1][1]])}
    return report


def start_profiles(directory: Path, server_pid: int) -> list:
    """py-spy on each server process, then on this one (last); raw stacks kept in
    ``directory`` (profile-<pid>.txt) for a closer look."""
    pids = [p.pid for p in harness.process_tree(server_pid)]
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    spies = []
    for pid in [*pids, psutil.Process().pid]:
        out = directory / f"profile-{pid}.txt"
        spies.append((harness.profile_start(pid, out), out))
    time.sleep(1.0)  # py-spy attaches before the replay starts
    return spies


def summarise(args, workers: int, result: dict, cpu: dict, gpu_rows: int) -> dict:
    wall = result["wall_s"]
    lat = result.pop("latencies")
    # Every stored batch carries the bench sample's values: counted as tests.bench.ingest
    # counts them, so the two benchmarks' values/s and CPU per value compare.
    values = gpu_rows / args.gpus * sum(loadgen.values_per_batch(args.gpus).values())
    return {
        "workers": workers, "batches": args.batches, "gpus_per_batch": args.gpus,
        "wall_s": round(wall, 2), "gpu_rows_stored": gpu_rows,
        "gpu_rows_expected": args.batches * args.gpus,
        "gpu_rows_per_s": round(gpu_rows / wall),
        "values_per_s": round(values / wall),
        "batches_per_s": round(result["delivered_batches"] / wall),
        "requests": result["requests"], "statuses": result["statuses"],
        "batches_per_request": round(result["delivered_batches"] / max(1, result["requests"]),
                                     1),
        "request_ms": {q: round(harness.percentile(lat, p) * 1000, 1)
                       for q, p in (("p50", 0.5), ("p90", 0.9), ("max", 1.0))},
        "left_in_spool": result["left_in_spool"],
        "cpu_s": cpu, "cores_busy": {k: round(v / wall, 2) for k, v in cpu.items()},
        "cpu_us_per_gpu_row": {k: round(1e6 * v / max(1, gpu_rows), 2) for k, v in cpu.items()},
        "cpu_s_per_million_values": {k: round(1e6 * v / max(1, values), 2)
                                     for k, v in cpu.items()},
        "client_cpu_by_phase_s": result["client_cpu_by_phase_s"],
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    others = harness.bench_running_elsewhere()
    if others:
        print("another benchmark is running; wait for it:\n  " + "\n  ".join(others))
        return 1
    harness.use_bench_database(harness.bench_env())
    pristine = args.dir / "pristine"
    print(f"replay bench: building a spool of {args.batches} batches in {pristine} ...",
          flush=True)
    built = build_spool(pristine, args.batches, args.gpus)
    runs = []
    for workers in args.workers:
        for profile in (False, True) if args.profile else (False,):
            print(f"replaying with {workers} worker(s){' under py-spy' if profile else ''} ...",
                  flush=True)
            run = one_run(args, pristine, workers, profile)
            print(json.dumps({k: run[k] for k in ("wall_s", "gpu_rows_per_s", "values_per_s",
                                                  "cpu_s")}),
                  flush=True)
            runs.append(run)
    shutil.rmtree(args.dir, ignore_errors=True)
    ceilings = []
    for workers in args.workers if args.ceiling else ():
        print(f"server ceiling with {workers} worker(s) ...", flush=True)
        ceilings.append(ceiling_run(args, workers))
        print(json.dumps({k: ceilings[-1][k] for k in ("wall_s", "gpu_rows_per_s", "cpu_s")}),
              flush=True)
    best = max((r for r in runs if "profile" not in r), key=lambda r: r["gpu_rows_per_s"])
    report = {"machine": harness.machine(), "spool": built, "runs": runs,
              "server_ceiling": ceilings,
              "target_gpu_rows_per_s": TARGET_GPU_ROWS_PER_S,
              "best_gpu_rows_per_s": best["gpu_rows_per_s"],
              "met": best["gpu_rows_per_s"] >= TARGET_GPU_ROWS_PER_S
              and best["gpu_rows_stored"] == best["gpu_rows_expected"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    print(f"target >= {TARGET_GPU_ROWS_PER_S} GPU rows/s: {'met' if report['met'] else 'NOT met'}"
          f" (best {best['gpu_rows_per_s']} with {best['workers']} worker(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
