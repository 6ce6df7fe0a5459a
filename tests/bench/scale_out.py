"""Scale-out benchmark: 2 ingest processes and 2 evaluator shards over 2,000 hosts, one PostgreSQL.

    make bench-scale-out
    python -m tests.bench.scale_out --samples-per-batch 1     # one request per sample

The fleet is the alert benchmark's (tests/bench/alerts_eval.py): 2,000 hosts of 8 GPUs, one
engine and one process each, 7 minutes of raw rows at 1 s, the storm's 500 rules, in the
database ``--database`` (built with ``alerts_eval --hosts 2000`` when it is missing). Each host
gets a new agent token, and a simulated agent (tests/bench/loadgen.py) sends its inventory,
built from the host's own GPU and engine rows, so ingest writes those hosts and no others.

Then, in one run:
- the real ingest server (uvicorn, ``--workers`` processes) takes 1-s samples from the 2,000
  agents, one ``--samples-per-batch``-sample batch per agent per request;
- meanwhile the evaluator shards run side by side, each in a process of its own
  (``alerts_eval --shard I/N``), a cycle every ``--pace`` seconds as beat's tick starts them.
  They evaluate the storm's last minutes, the same rows and work as the alert benchmark's: the
  agents' rows land after them, so what ingest adds to a cycle is the machine's contention
  (CPU, PostgreSQL, its WAL and buffers), not rows in its windows.

Measured from the end of the shards' first cycle (it reads the whole window) to their exit:
CPU-s per second of each component (the ingest server, PostgreSQL's backends by
application_name, each shard, the load generator), per 1,000 hosts; the machine's idle
fraction; each shard's cycles against one evaluator alone over ``--hosts / --shards`` hosts,
measured before and after in the same run (``alerts_eval --reuse`` on ``--baseline-database``);
ingest's samples stored a second, p99 and errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import uvloop

from tests.bench import alerts_eval, autovacuum, harness, loadgen

INGEST_APP = "pitwall-bench-ingest"
OTHERS = "other processes on the machine (other sessions, other databases)"
WITHIN = 1.10  # a shard's cycle beside ingest against one evaluator alone: the goal's 10 %


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument("--samples-per-batch", type=int, default=5, metavar="N",
                        help="1-s samples, one N-sample batch per agent every N s")
    parser.add_argument("--cycles", type=int, default=7, help="cycles of each shard")
    parser.add_argument("--pace", type=float, default=10.0,
                        help="seconds between cycles (the evaluation interval)")
    parser.add_argument("--warmup", type=float, default=15.0,
                        help="seconds of ingest before the shards start")
    parser.add_argument("--database", default="test_pw_ae2000")
    parser.add_argument("--baseline-database", default="test_pw_ae1000")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the single evaluator's runs before and after")
    parser.add_argument("--stagger", action="store_true",
                        help="shard I's ticks I/N of an interval after shard 0's, not with "
                             "them (not what beat's broadcast does today)")
    parser.add_argument("--shards-only", action="store_true",
                        help="the shards side by side without ingest (what ingest adds)")
    parser.add_argument("--port", type=int, default=18766)
    parser.add_argument("--out", type=Path, default=harness.ROOT / "var/bench/scale_out.json")
    return parser.parse_args(argv)


def env_for(database: str) -> dict[str, str]:
    """The bench environment pointed at ``database`` (its children read PITWALL_BENCH_DB)."""
    env = harness.bench_env(PITWALL_BENCH_DB=database)
    env["DATABASE_URL"] = env["DATABASE_URL"].rsplit("/", 1)[0] + "/" + database
    return env


def state_path(database: str) -> Path:
    """The alert benchmark's report for ``database``; its state file (``.state.json``) keeps
    the load's end, the instant every cycle is evaluated at."""
    return harness.ROOT / "var/bench/scale_out" / f"alerts_eval_{database}.json"


def database_exists(database: str) -> bool:
    import psycopg

    with psycopg.connect("host=127.0.0.1 dbname=postgres", autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (database,)).fetchone() is not None


def alerts_eval_run(database: str, *args: str) -> None:
    """``alerts_eval`` on ``database`` in a process of its own (its output goes through)."""
    import subprocess

    argv = [sys.executable, "-m", "tests.bench.alerts_eval", *args,
            "--out", str(state_path(database))]
    print(f"$ PITWALL_BENCH_DB={database} {' '.join(argv[1:])}", flush=True)
    subprocess.run(argv, cwd=harness.ROOT, env=env_for(database), check=True)


def ensure_fleet(database: str, hosts: int) -> None:
    """The alert benchmark's fleet of ``hosts`` in ``database``, loaded unless it is there
    with this benchmark's state file."""
    state = state_path(database).with_suffix(".state.json")
    if database_exists(database) and state.exists():
        return
    print(f"loading the alert fleet of {hosts} hosts into {database}", flush=True)
    alerts_eval_run(database, "--hosts", str(hosts), "--cycles", "2")


def single_evaluator(args: argparse.Namespace) -> dict:
    """One evaluator alone over ``hosts / shards`` hosts, paced as the shards are."""
    database = args.baseline_database
    ensure_fleet(database, args.hosts // args.shards)
    alerts_eval_run(database, "--reuse", "--cycles", str(args.cycles), "--pace", str(args.pace))
    report = json.loads(state_path(database).read_text())
    return {"when": report["when"], **cycle_figures(report["cycles"])}


def cycle_figures(cycles: list[dict]) -> dict:
    steady = cycles[1:] or cycles
    walls = [c["wall_s"] for c in steady]
    cpu = [c["python_cpu_s"] + c["postgres_cpu_s"] for c in steady]
    return {"wall_s_median": statistics.median(walls), "wall_s_range": [min(walls), max(walls)],
            "cpu_s_median": round(statistics.median(cpu), 3),
            "python_cpu_s_median": statistics.median(c["python_cpu_s"] for c in steady),
            "postgres_cpu_s_median": statistics.median(c["postgres_cpu_s"] for c in steady),
            "first_cycle_wall_s": cycles[0]["wall_s"], "walls_s": walls}


# -- the agents: the fleet's own hosts ------------------------------------------------------

def host_inventories(hosts: list, gpus: dict[int, list], engines: dict[int, list]) -> list:
    """(hostname, host id, inventory) of each host, from its rows: applying it changes none
    of what the evaluator reads (GPU names and sizes, the engines' GPUs and config)."""
    out = []
    for host in hosts:
        inventory = {
            "hostname": host.hostname, "simulated": host.simulated,
            "gpus": [{"uuid": g.uuid, "index": g.index, "name": g.name,
                      "mem_total_bytes": g.mem_total_bytes, "numa_node": g.numa_node,
                      "simulated": g.simulated} for g in gpus.get(host.id, [])],
            "engines": [{"name": e.name, "model": e.model, "gpu_uuids": e.gpu_uuids,
                         "config": e.config, "simulated": e.simulated}
                        for e in engines.get(host.id, [])]}
        if host.cpu_count:
            inventory["cpu_count"] = host.cpu_count
        out.append((host.hostname, host.id, inventory))
    return out


def fleet_inventories() -> list:
    from controlplane.fleet.models import Engine, Gpu, Host

    gpus: dict[int, list] = {}
    for gpu in Gpu.objects.order_by("host_id", "index"):
        gpus.setdefault(gpu.host_id, []).append(gpu)
    engines: dict[int, list] = {}
    for engine in Engine.objects.order_by("host_id", "name"):
        engines.setdefault(engine.host_id, []).append(engine)
    return host_inventories(list(Host.objects.order_by("id")), gpus, engines)


def issue_tokens(host_ids: list[int]) -> dict[int, str]:
    """A new agent token per host (the old ones' secrets are not kept: a rerun replaces
    them)."""
    from controlplane.fleet.models import AgentToken
    from controlplane.lib import tokens

    AgentToken.objects.filter(host_id__in=host_ids).delete()
    issued, rows = {}, []
    for host_id in host_ids:
        token, lookup, digest = tokens.new_token(tokens.AGENT)
        rows.append(AgentToken(host_id=host_id, lookup=lookup, digest=digest))
        issued[host_id] = token
    AgentToken.objects.bulk_create(rows)
    return issued


def fleet_agents(hosts: int) -> list[loadgen.Agent]:
    """An agent per host of the bench database, registering with the host's own inventory."""
    fleet = fleet_inventories()
    if len(fleet) != hosts:
        raise SystemExit(f"the bench database has {len(fleet)} hosts, not {hosts}")
    issued = issue_tokens([host_id for _, host_id, _ in fleet])
    return [loadgen.Agent(hostname, issued[host_id], len(inventory["gpus"]), host=inventory)
            for hostname, host_id, inventory in fleet]


# -- CPU per component ----------------------------------------------------------------------

def _cpu_s(proc: psutil.Process) -> float | None:
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return None
    return t.user + t.system


def postgres_group(row: tuple, database: str, groups: dict[str, str]) -> str | None:
    """The component a PostgreSQL process works for: a session's application_name, or one of
    the server's own processes; None for other databases' sessions."""
    datname, application, backend_type = row
    if backend_type in harness.SHARED_BACKENDS:
        return "postgres: WAL writer, checkpointer, background writer"
    if datname != database:
        return None
    if backend_type == "autovacuum worker":
        return "postgres: autovacuum"
    return groups.get(application, "postgres: other sessions of the bench database")


class ComponentMeter:
    """CPU-s per component between start() and stop(), read twice a second so that PostgreSQL
    processes that come and go (parallel workers, autovacuum workers) count while they live;
    what ends between two reads is left to the machine's unattributed remainder."""

    def __init__(self, database: str, processes: dict[str, list[psutil.Process]],
                 applications: dict[str, str]) -> None:
        self.database, self.applications = database, applications
        self.processes = processes
        # pid -> [component, process, CPU-s at the start or at birth, CPU-s last read]
        self.seen: dict[int, list] = {}
        self._task: asyncio.Task | None = None
        self._conn = None
        self.machine_before = psutil.cpu_times()
        self.started = 0.0

    async def start(self) -> None:
        import psycopg

        self._conn = await psycopg.AsyncConnection.connect(
            "host=127.0.0.1 user=postgres dbname=postgres", autocommit=True)
        self.machine_before, self.started = psutil.cpu_times(), time.monotonic()
        for name, procs in self.processes.items():
            for proc in procs:
                self._track(proc.pid, name, proc, at_start=True)
        await self._read(at_start=True)
        self._task = asyncio.create_task(self._poll())

    def _track(self, pid: int, name: str, proc: psutil.Process, at_start: bool) -> None:
        cpu = _cpu_s(proc)
        if cpu is not None:  # one born after the start spent all its CPU in the window
            self.seen[pid] = [name, proc, cpu if at_start else 0.0, cpu]

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            await self._read()

    async def _read(self, at_start: bool = False) -> None:
        cur = await self._conn.execute(
            "SELECT a.pid, a.datname, coalesce(l.application_name, a.application_name), "
            "a.backend_type FROM pg_stat_activity a LEFT JOIN pg_stat_activity l "
            "ON l.pid = a.leader_pid WHERE a.pid <> pg_backend_pid()")
        for pid, *row in await cur.fetchall():
            name = postgres_group(tuple(row), self.database, self.applications)
            if name is not None and pid not in self.seen:
                try:
                    self._track(pid, name, psutil.Process(pid), at_start)
                except psutil.Error:
                    continue
        for proc in psutil.process_iter():  # the rest: other sessions' work on the machine
            if proc.pid not in self.seen:
                self._track(proc.pid, OTHERS, proc, at_start)
        for entry in self.seen.values():
            cpu = _cpu_s(entry[1])
            if cpu is not None:
                entry[3] = cpu

    async def stop(self) -> dict:
        self._task.cancel()
        await self._read()
        await self._conn.close()
        seconds = time.monotonic() - self.started
        after = psutil.cpu_times()
        # guest time is counted in user time already
        spent = {f: getattr(after, f) - getattr(self.machine_before, f)
                 for f in after._fields if not f.startswith("guest")}
        total = sum(spent.values())
        idle = spent["idle"] + spent.get("iowait", 0.0)
        by: dict[str, float] = {}
        for name, _, base, last in self.seen.values():
            by[name] = by.get(name, 0.0) + last - base
        return {"seconds": seconds, "cpu_s": by,
                "machine": {"busy_cpu_s": total - idle, "idle_fraction": idle / total,
                            "iowait_fraction": spent.get("iowait", 0.0) / total,
                            "steal_fraction": spent.get("steal", 0.0) / total,
                            "cores": psutil.cpu_count()}}


# -- what autovacuum would do, on a server that runs with it off (CI's) ------------------------

SUMMARISER_APP = "pitwall-bench-autovacuum"
BRIN_RANGES_SQL = """
SELECT i.indexrelid::regclass::text, coalesce((
         SELECT option_value::int FROM pg_options_to_table(c.reloptions)
         WHERE option_name = 'pages_per_range'), 128)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
WHERE i.indrelid = %s::regclass AND a.amname = 'brin'
"""


def ingest_ranges(end: datetime) -> list[list]:
    """[BRIN index, table, pages per range, first block] of each raw table partition ingest
    writes today: past the bench's own rows where that is the partition of the load's end."""
    from django.db import connection

    from controlplane.telemetry import partitions
    from controlplane.telemetry.schema import TABLES

    out = []
    with connection.cursor() as cursor:
        for table in TABLES.values():
            part = partitions.partition_name(table.name, datetime.now(UTC).date())
            cursor.execute("SELECT to_regclass(%s)", (part,))
            if cursor.fetchone()[0] is None:
                continue
            cursor.execute(BRIN_RANGES_SQL, (part,))
            for index, per_range in cursor.fetchall():
                cursor.execute(f"SELECT max((ctid::text::point)[0])::bigint FROM {part} "
                               "WHERE ts > %s::timestamptz - interval '2 s' AND ts <= %s",
                               (end, end))
                last = cursor.fetchone()[0]
                # the range holding the bench's last rows stays as the bench left it
                first = 0 if last is None else (last // per_range + 1) * per_range
                out.append([index, part, per_range, first])
    return out


SUMMARISE_SQL = """
SELECT count(brin_summarize_range(%(index)s::regclass, b))
FROM generate_series(%(first)s::bigint, %(stop)s::bigint - 1, %(per_range)s::bigint) AS b
"""


def summarise_sql(ranges: list, pages: int) -> tuple[str, dict] | None:
    """The statement that summarises the full block ranges from ``ranges``' first block, as
    autosummarize does once the next range gets rows (None: none is full yet); advances it."""
    index, _, per_range, first = ranges
    stop = (pages - 1) // per_range * per_range  # the last range, still filling, stays out
    if stop <= first:
        return None
    ranges[3] = stop
    return SUMMARISE_SQL, {"index": index, "first": first, "stop": stop,
                           "per_range": per_range}


async def summarise(conn, ranges: list[list]) -> None:
    for entry in ranges:
        cur = await conn.execute("SELECT pg_relation_size(%s) / current_setting('block_size')"
                                 "::int", (entry[1],))
        statement = summarise_sql(entry, (await cur.fetchone())[0])
        if statement is not None:
            await conn.execute(*statement)


async def summarise_now(database: str, ranges: list[list]) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(
            f"host=127.0.0.1 dbname={database}", autocommit=True) as conn:
        await summarise(conn, ranges)


async def summarise_every(database: str, ranges: list[list], seconds: float) -> None:
    """BRIN's autosummarize, which autovacuum's workers carry out: ingest's rows summarised
    as it fills ranges, so the cycles' reads of the load's last minutes meet one unsummarised
    tail, the bench's own (as the single evaluator's do), and not ingest's on top."""
    import psycopg

    conn = await psycopg.AsyncConnection.connect(
        f"host=127.0.0.1 dbname={database} application_name={SUMMARISER_APP}",
        autocommit=True)
    try:
        while True:
            await summarise(conn, ranges)
            await asyncio.sleep(seconds)
    finally:
        await conn.close()


# -- the run ---------------------------------------------------------------------------------

async def run_shards(args: argparse.Namespace, on_first_cycles) -> list[dict]:
    """The evaluator shards, each in a process of its own, all at once; ``on_first_cycles``
    is awaited once every shard has finished its first cycle, with their processes."""
    ae_args = alerts_eval.parse_args(["--reuse", "--cycles", str(args.cycles), "--pace",
                                      str(args.pace), "--out", str(state_path(args.database))])
    children = []
    for i in range(args.shards):
        # together on beat's broadcast tick, or --stagger: spread over the interval
        phase = i * args.pace / args.shards if args.stagger else 0.0
        argv, env = alerts_eval.shard_command(ae_args, i, args.shards, phase)
        children.append(await asyncio.create_subprocess_exec(
            *argv, cwd=harness.ROOT, env={**env_for(args.database), **env,
                                          "PITWALL_BENCH_DB": args.database},
            stdout=asyncio.subprocess.PIPE))
    first_done = [asyncio.Event() for _ in children]

    async def read(i: int, child) -> str:
        lines = []
        async for raw in child.stdout:
            line = raw.decode()
            lines.append(line)
            print(f"[shard {i}] {line}", end="", flush=True)
            if line.lstrip().startswith("cycle 0:"):
                first_done[i].set()
        await child.wait()
        first_done[i].set()  # a failed shard must not hold the others' window
        return "".join(lines)

    readers = [asyncio.create_task(read(i, c)) for i, c in enumerate(children)]
    await asyncio.gather(*(e.wait() for e in first_done))
    await on_first_cycles([psutil.Process(c.pid) for c in children])
    outs = await asyncio.gather(*readers)
    return [alerts_eval.shard_summary(out, c.returncode)
            for out, c in zip(outs, children, strict=True)]


@contextlib.asynccontextmanager
async def autovacuum_stand_ins(database: str, ranges: list[list], vacuum: bool):
    """While ingest runs: its BRIN ranges summarised every 5 s and, where the server's
    autovacuum is off, tables vacuumed as it would every minute (tests/bench/autovacuum.py)."""
    summariser = asyncio.create_task(summarise_every(database, ranges, 5.0))
    stand_in = autovacuum.StandIn(
        f"host=127.0.0.1 dbname={database} application_name={SUMMARISER_APP}", 60.0) \
        if vacuum else None
    if stand_in is not None:
        stand_in.start()
    try:
        yield
    finally:
        summariser.cancel()
        await asyncio.gather(summariser, return_exceptions=True)
        if stand_in is not None:
            await asyncio.to_thread(stand_in.stop)


async def drive(args: argparse.Namespace, agents: list[loadgen.Agent],
                server_pid: int | None) -> dict:
    """The agents (none with ``--shards-only``) and, after the warm-up, the shards."""
    t = time.monotonic()
    await loadgen.register(agents, args.port)
    print(f"{len(agents)} agents registered in {time.monotonic() - t:.1f} s", flush=True)
    results = loadgen.Results()
    start = time.monotonic()
    measure_from = start + args.warmup
    until = start + 24 * 3600  # stopped when the shards are done
    tasks = [asyncio.create_task(loadgen.run_agent(
        a, args.port, 1.0, until, measure_from, results,
        samples_per_batch=args.samples_per_batch)) for a in agents]
    await asyncio.sleep(args.warmup if agents else 0.0)
    applications = {INGEST_APP: "postgres: ingest",
                    SUMMARISER_APP: "postgres: autovacuum's stand-in"} | {
        f"pitwall-bench-shard-{i}": f"postgres: shard {i}" for i in range(args.shards)}
    window: dict = {}

    async def on_first_cycles(shard_procs: list[psutil.Process]) -> None:
        # from shard 0's next tick: the window holds whole intervals
        await asyncio.sleep(-time.time() % args.pace if args.pace > 0 else 0.0)
        processes = {"load generator": [psutil.Process()]}
        if server_pid is not None:
            processes["ingest server"] = harness.process_tree(server_pid)
        processes |= {f"shard {i}": [p] for i, p in enumerate(shard_procs)}
        window["meter"] = ComponentMeter(args.database, processes, applications)
        await window["meter"].start()
        window["from"], window["from_wall"] = time.monotonic(), time.time()

    print(f"shards starting after {args.warmup:.0f} s of ingest", flush=True)
    shards = await run_shards(args, on_first_cycles)
    measured = await window["meter"].stop()
    window["to"], window["to_wall"] = time.monotonic(), time.time()
    # the samples taken in the window's last seconds go in the agents' next batch
    await asyncio.sleep(args.samples_per_batch + 2.0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"shards": shards, "measured": measured, "window": window, "results": results}


async def ingest_beside_shards(args, agents, server_pid: int, ranges: list[list],
                               vacuum: bool) -> dict:
    async with autovacuum_stand_ins(args.database, ranges, vacuum):
        return await drive(args, agents, server_pid)


def stored_in(start: float, end: float) -> dict[str, int]:
    """Rows stored whose sample time falls in [start, end) (unix seconds), per table."""
    from django.db import connection

    from controlplane.telemetry.schema import TABLES

    out = {}
    with connection.cursor() as cursor:
        for entity in ("host", "gpu"):
            cursor.execute(f"SELECT count(*) FROM {TABLES[entity].name} WHERE ts >= "
                           "to_timestamp(%s) AND ts < to_timestamp(%s)", (start, end))
            out[entity] = cursor.fetchone()[0]
    return out


def ingest_figures(args, results: loadgen.Results, window: dict, stored: dict) -> dict:
    seconds = window["to"] - window["from"]
    inside = [lat for sent, lat in zip(results.sent, results.latencies, strict=True)
              if window["from"] <= sent < window["to"]]
    return {"requests_per_s": round(len(inside) / seconds, 1),
            "samples_per_s_answered": round(len(inside) * args.samples_per_batch / seconds, 1),
            "samples_per_s_stored": round(stored["host"] / seconds, 1),
            "samples_stored_of_expected": f"{stored['host']} of {round(args.hosts * seconds)}",
            "gpu_rows_per_s": round(stored["gpu"] / seconds, 1),
            "latency_ms": {q: round(harness.percentile(inside, p) * 1000, 1)
                           for q, p in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))},
            "errors_since_shards_started": results.errors}


def components(args, measured: dict, shards: list[dict]) -> dict:
    """CPU-s a second of each component and per 1,000 of the hosts it serves."""
    seconds = measured["seconds"]
    served = {"shard": args.hosts / args.shards}
    out = {}
    for name, cpu in sorted(measured["cpu_s"].items()):
        out[name] = {"cpu_s": round(cpu, 2), "cores": round(cpu / seconds, 3)}
        if name != OTHERS:
            hosts = served["shard"] if "shard" in name else args.hosts
            out[name]["cores_per_1000_hosts"] = round(cpu / seconds * 1000 / hosts, 3)
    machine = measured["machine"]
    attributed = sum(measured["cpu_s"].values())
    out["unattributed (processes born and gone between two reads, the kernel)"] = {
        "cpu_s": round(machine["busy_cpu_s"] - attributed, 2),
        "cores": round((machine["busy_cpu_s"] - attributed) / seconds, 3)}
    return out


def cores_unstretched(args, parts: dict, baseline: list[dict]) -> dict:
    """What the components would need for each shard's cycle to take its alone time: ingest
    and PostgreSQL's steady work, plus while the shards' cycles run, each shard's CPU a cycle
    over its wall time alone."""
    steady = sum(v["cores"] for k, v in parts.items() if "cores_per_1000_hosts" in v
                 and "shard" not in k and k != "load generator")
    if not baseline:
        return {"steady_cores_without_shards": round(steady, 2)}
    cpu = statistics.mean(b["cpu_s_median"] for b in baseline)
    wall = statistics.mean(b["wall_s_median"] for b in baseline)
    return {"steady_cores_without_shards_and_loadgen": round(steady, 2),
            "a_shard_while_its_cycle_runs": round(cpu / wall, 2),
            "all_while_the_shards_cycle": round(steady + args.shards * cpu / wall, 2),
            "shards_on_average": round(args.shards * cpu / args.pace, 2)}


def verdict(shards: list[dict], baseline: list[dict]) -> dict:
    if not baseline:
        return {}
    alone = statistics.median(w for b in baseline for w in b["walls_s"])
    return {"single_evaluator_wall_s_median": alone,
            **{f"shard {s['figures']['shard']}": {
                "ratio": round(s["figures"]["wall_s_median"] / alone, 3),
                "within_10_pct": s["figures"]["wall_s_median"] <= WITHIN * alone}
               for s in shards}}


def shard_figures(shards: list[dict]) -> list[dict]:
    return [{"figures": {"shard": s["shard"], **cycle_figures(s["cycles"])},
             "cycles": s["cycles"]} for s in shards]


def combined(args: argparse.Namespace) -> dict:
    env = env_for(args.database)
    harness.use_bench_database(env)
    import django

    django.setup()
    from django.db import connection, connections

    alerts_eval.forget_alerts()
    vacuum = not autovacuum.server_autovacuum_on(connection)
    agents = fleet_agents(args.hosts)
    end = datetime.fromisoformat(
        json.loads(state_path(args.database).with_suffix(".state.json").read_text())["end"])
    ranges = ingest_ranges(end)
    connections.close_all()
    uvloop.run(summarise_now(args.database, ranges))  # earlier runs' rows, before the clock
    if args.shards_only:
        run = uvloop.run(drive(args, [], None))
        return {"measured": run["measured"], "shards": shard_figures(run["shards"]), "ingest": {}}
    server_env = {**env, "PGAPPNAME": INGEST_APP}
    with harness.server(server_env, args.port, args.workers) as proc:
        # uvloop: the load generator shares the cores, its own loop should cost little
        run = uvloop.run(ingest_beside_shards(args, agents, proc.pid, ranges, vacuum))
    window = run["window"]
    stored = stored_in(window["from_wall"], window["to_wall"])
    return {"measured": run["measured"], "shards": shard_figures(run["shards"]),
            "ingest": ingest_figures(args, run["results"], window, stored)}


def main(argv=None) -> int:
    args = parse_args(argv)
    others = harness.bench_running_elsewhere()
    if others:
        print("other benchmarks are running; their load would skew this one:", *others,
              sep="\n  ")
    report: dict = {"machine": harness.machine(), "when": datetime.now(UTC).isoformat(),
                    "args": {k: str(v) for k, v in vars(args).items()}}
    ensure_fleet(args.database, args.hosts)
    baseline = [] if args.no_baseline else [single_evaluator(args)]
    run = combined(args)
    if not args.no_baseline:
        baseline.append(single_evaluator(args))
    parts = components(args, run["measured"], run["shards"])
    report |= {"window_s": round(run["measured"]["seconds"], 1),
               "machine_idle_fraction": round(run["measured"]["machine"]["idle_fraction"], 3),
               "machine_window": run["measured"]["machine"], "components": parts,
               "shards": run["shards"], "single_evaluator": baseline,
               "verdict": verdict(run["shards"], baseline), "ingest": run["ingest"],
               "cores_unstretched": cores_unstretched(args, parts, baseline)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    summary = {k: report[k] for k in ("window_s", "machine_idle_fraction", "components",
                                      "verdict", "ingest", "cores_unstretched")}
    summary["shards"] = [s["figures"] for s in run["shards"]]
    summary["single_evaluator"] = baseline
    print(json.dumps(summary, indent=2))
    print(f"report in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
