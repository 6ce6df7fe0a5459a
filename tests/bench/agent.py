"""Agent overhead benchmark: one real agent process streaming 8 simulated GPUs to a real server.

    make bench-agent                         # 5 measured minutes (the issue's figure)
    python -m tests.bench.agent --minutes 1  # a quick look

The bench starts a fresh bench database, the server, a simulated vLLM (its own process, so
its cost is simply not counted) and ``python -m agents run --gpu-backend sim``. It reports the
agent process's CPU (user + sys over wall, % of one core) and peak RSS (sampled every second,
and the kernel's VmHWM).

The simulated GPUs run *inside* the agent (SimNvml stands in for the NVML module), so their
cost is measured apart and subtracted: a second process (this module with --breakdown) builds
the agent's own sources the way ``agents run`` does and times each collector with
time.process_time over N intervals, plus an NvmlCollector over a constant-returning fake NVML
module. "sim share" = NVML-over-SimNvml minus NVML-over-fake: what the simulation adds over a
driver that answers for free. A real driver's own time is not free and is not in the net
figure; the report counts the NVML calls per interval so it can be sized.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tests.bench import harness

HOSTNAME = "bench-agent-00"
TARGET_CPU_PCT = 1.0
TARGET_RSS_MB = 60.0


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="measured minutes")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds before measuring")
    parser.add_argument("--iterations", type=int, default=60,
                        help="intervals of the in-process breakdown")
    parser.add_argument("--port", type=int, default=18766)
    parser.add_argument("--vllm-port", type=int, default=18801)
    parser.add_argument("--out", type=Path, default=harness.ROOT / "var" / "bench" / "agent.json")
    parser.add_argument("--breakdown", metavar="SERVER_URL", help=argparse.SUPPRESS)
    parser.add_argument("--token", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# -- the agent process, measured from outside ----------------------------------------------

def vm_hwm(pid: int) -> int | None:
    """The kernel's peak resident set of ``pid`` (VmHWM), bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def watch_agent(proc: subprocess.Popen, warmup: float, measured: float, rows_per_s: float,
                ) -> dict:
    """CPU over the measured window and RSS every second from launch; the agent must live."""
    agent = psutil.Process(proc.pid)
    peak_rss = peak_rss_measured = 0
    started = time.monotonic()
    measure_from, until = started + warmup, started + warmup + measured
    cpu0 = wall0 = rows0 = None
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the agent exited with {proc.returncode}")
        now = time.monotonic()
        if cpu0 is None and now >= measure_from:
            rows0, wall0 = harness.count_samples("gpu"), time.monotonic()
            times = agent.cpu_times()
            cpu0 = (times.user, times.system)
        if now >= until:
            break
        rss = agent.memory_info().rss
        peak_rss = max(peak_rss, rss)
        if cpu0 is not None:
            peak_rss_measured = max(peak_rss_measured, rss)
        time.sleep(max(0.0, min(1.0, until - time.monotonic())))
    times, wall = agent.cpu_times(), time.monotonic() - wall0
    user, system = times.user - cpu0[0], times.system - cpu0[1]
    return {"measured_s": round(wall, 1), "cpu_user_s": round(user, 3),
            "cpu_sys_s": round(system, 3), "cpu_pct": round(100 * (user + system) / wall, 3),
            "rss_peak_mb": mb(peak_rss), "rss_peak_measured_mb": mb(peak_rss_measured),
            "vmhwm_mb": mb(vm_hwm(proc.pid) or 0), "threads": agent.num_threads(),
            "gpu_rows_stored": harness.count_samples("gpu") - rows0,
            "gpu_rows_expected": round(wall * rows_per_s)}


def mb(n: int) -> float:
    return round(n / 2**20, 1)


def sim_import_rss() -> float:
    """MB a fresh interpreter gains from the simulation alone, after importing what the agent
    imports on any host (its collectors, transport, pynvml): a process of its own."""
    code = ("import pathlib, agents.cli, agents.collectors.host, agents.collectors.nvml, "
            "agents.collectors.process, agents.collectors.vllm, agents.transport, pynvml\n"
            "def rss(): return int([l for l in pathlib.Path('/proc/self/status').read_text()"
            ".splitlines() if l.startswith('VmRSS')][0].split()[1]) * 1024\n"
            "a = rss()\nfrom agents.sim.gpus import SimNvml\n"
            "s = SimNvml.for_host('x', 8, ['http://127.0.0.1:1/metrics']); s.nvmlInit()\n"
            "print(rss() - a)")
    done = subprocess.run([sys.executable, "-c", code], cwd=harness.ROOT, capture_output=True,
                          text=True, timeout=60)
    return mb(int(done.stdout.strip() or 0))


# -- the in-process breakdown (a child process: no Django, no bench state in its heap) --------

class Timed:
    """Forwards to a collector, adding the CPU time of each call to "<bucket>.<method>"."""

    def __init__(self, target, bucket: str, totals: dict[str, float]) -> None:
        self._target, self._bucket, self._totals = target, bucket, totals

    def __getattr__(self, name: str):
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def timed(*args, **kwargs):
            started = time.process_time()
            try:
                return value(*args, **kwargs)
            finally:
                self._totals[f"{self._bucket}.{name}"] += time.process_time() - started
        return timed


class FakeNvml:
    """An NVML module whose every call returns a prepared constant: the collector's own cost.

    Data-center GPUs without a fan, as SimNvml simulates, so the collector does the same work.
    """

    SIMULATED = False

    def __init__(self, count: int, pid: int) -> None:
        import pynvml

        self.__dict__["calls"] = 0
        gib = 2**30
        mem = pynvml.c_nvmlMemory_v2_t(version=pynvml.nvmlMemory_v2, total=80 * gib,
                                       reserved=gib, free=8 * gib, used=71 * gib)
        util = pynvml.c_nvmlUtilization_t(gpu=97, memory=61)
        pci = pynvml.nvmlPciInfo_t(busId=b"00000000:18:00.0")
        procs = [pynvml.nvmlFriendlyObject({"pid": pid, "usedGpuMemory": 70 * gib})]
        uuids = [f"GPU-fake-{i}" for i in range(count)]

        def fail(code):
            def raise_(*_):
                raise pynvml.NVMLError(code)
            return raise_

        self.__dict__["_answers"] = {
            "nvmlInit": lambda: None, "nvmlShutdown": lambda: None,
            "nvmlSystemGetDriverVersion": lambda: "550.127.08",
            "nvmlDeviceGetCount": lambda: count, "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlDeviceGetPciInfo": lambda h: pci, "nvmlDeviceGetMigMode": lambda h: [0, 0],
            "nvmlDeviceGetUUID": uuids.__getitem__, "nvmlDeviceGetName": lambda h: "fake",
            "nvmlDeviceGetMemoryInfo": lambda h, version=None: mem,
            "nvmlDeviceGetUtilizationRates": lambda h: util,
            "nvmlDeviceGetTemperatureV": lambda h, sensor, version=0: 67,
            "nvmlDeviceGetPowerUsage": lambda h: 612500,
            "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700000,
            "nvmlDeviceGetClockInfo": lambda h, kind: 1980,
            "nvmlDeviceGetPcieThroughput": lambda h, counter: 1000,
            "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0,
            "nvmlDeviceGetTotalEccErrors": lambda h, kind, counter: 0,
            "nvmlDeviceGetFanSpeed": fail(pynvml.NVML_ERROR_NOT_SUPPORTED),
            "nvmlDeviceGetComputeRunningProcesses": lambda h: procs,
            "nvmlEventSetCreate": object, "nvmlDeviceRegisterEvents": lambda h, kind, s: None,
            "nvmlEventSetWait": fail(pynvml.NVML_ERROR_TIMEOUT), "nvmlEventSetFree": lambda s: None,
        }

    def __getattr__(self, name: str):
        answer = self._answers.get(name)
        if answer is None:
            import pynvml

            return getattr(pynvml, name)  # constants and error classes, as SimNvml does
        self.__dict__["calls"] += 1
        return answer


def breakdown(args, token: str) -> dict:
    """The agent's own loop and sender, run in step, with each source timed apart."""
    from collections import defaultdict

    from agents.batch import BatchBuilder
    from agents.cli import build_sources
    from agents.collectors.nvml import NvmlCollector
    from agents.config import AgentConfig
    from agents.loop import Loop, Sampler
    from agents.spool import Spool
    from agents.transport import IngestClient, Shipper

    url = f"http://127.0.0.1:{args.vllm_port}/metrics"
    tmp = tempfile.TemporaryDirectory(prefix="pitwall-agent-breakdown-")
    config = AgentConfig(command="run", gpu_backend="sim", sim_gpus=args.gpus,
                         vllm_metrics_urls=(url,), interval=args.interval, hostname=HOSTNAME,
                         spool_dir=Path(tmp.name), server=args.breakdown, token=token)
    totals: dict[str, float] = defaultdict(float)
    src = build_sources(config, harness_warn, require_gpus=True)
    src.host = Timed(src.host, "host", totals)
    src.gpus = Timed(src.gpus, "nvml_over_sim", totals)
    src.engines = [Timed(e, "vllm_scrape_parse", totals) for e in src.engines]
    src.processes = Timed(src.processes, "process", totals)
    fake_nvml = FakeNvml(args.gpus, os.getpid())
    fake = Timed(NvmlCollector(nvml=fake_nvml, warn=harness_warn), "nvml_over_fake", totals)
    builder = BatchBuilder()
    shipper = Shipper(IngestClient(args.breakdown, token), Spool(tmp.name, 2**26),
                      inventory=lambda: builder.inventory,
                      on_inventory_needed=builder.inventory_needed, warn=harness_warn)
    loop = Loop(Sampler(src, harness_warn), builder, shipper.submit, args.interval)
    deadline = time.monotonic()
    for i in range(-3, args.iterations):  # 3 unmeasured ticks prime rates and caches
        if i == 0:
            totals.clear()
            fake_nvml.calls = 0
        before, started = sum(totals.values()), time.process_time()
        loop.tick()
        totals["sampler_inventory_framing"] += (time.process_time() - started
                                                - (sum(totals.values()) - before))
        started = time.process_time()
        shipper.step()
        totals["transport_encode_gzip_http"] += time.process_time() - started
        fake.collect(), fake.process_gpu_memory(), fake.inventory(), fake.driver_version()
        deadline += args.interval
        time.sleep(max(0.0, deadline - time.monotonic()))
    src.close()
    tmp.cleanup()
    return breakdown_report(totals, args, fake_nvml.calls, shipper.delivered_batches)


def breakdown_report(totals: dict[str, float], args, nvml_calls: int, delivered: int) -> dict:
    span = args.iterations * args.interval

    def figures(seconds: float) -> dict:
        return {"ms_per_interval": round(1000 * seconds / args.iterations, 3),
                "pct_of_core": round(100 * seconds / span, 4)}

    sources: dict[str, float] = {}
    for key, seconds in totals.items():
        source = key.split(".")[0]
        sources[source] = sources.get(source, 0.0) + seconds
    sim = max(0.0, sources.get("nvml_over_sim", 0) - sources.get("nvml_over_fake", 0))
    agent = sum(v for k, v in sources.items() if k != "nvml_over_fake")
    return {"iterations": args.iterations,
            "per_source": {k: figures(v) for k, v in sorted(sources.items(), key=_by_cost)},
            "per_method": {k: figures(v) for k, v in sorted(totals.items(), key=_by_cost)
                           if "." in k},
            "in_process_total_pct": round(100 * agent / span, 4),
            "sim_share_pct": round(100 * sim / span, 4),
            "nvml_calls_per_interval": round(nvml_calls / args.iterations, 1),
            "batches_delivered": delivered}


def _by_cost(item: tuple[str, float]) -> float:
    return -item[1]


def harness_warn(message: str) -> None:
    print(f"breakdown: warning: {message}", file=sys.stderr, flush=True)


# -- the orchestration -----------------------------------------------------------------------

def run(args) -> dict:
    from agents.sim import fleet

    env = harness.bench_env()
    harness.use_bench_database(env)
    print(f"agent bench: fresh database {harness.BENCH_DB}, 1 agent x {args.gpus} sim GPUs, "
          f"{args.minutes:g} min after {args.warmup:g} s warm-up ...", flush=True)
    harness.fresh_database(env)
    token = harness.create_agent_token(HOSTNAME)
    server_url = f"http://127.0.0.1:{args.port}"
    with tempfile.TemporaryDirectory(prefix="pitwall-agent-bench-") as tmp, \
            harness.server(env, args.port, 1):
        token_file, log = Path(tmp) / "token", Path(tmp) / "agent.log"
        token_file.write_text(token)
        vllm = subprocess.Popen(fleet.engine_argv(args.vllm_port, args.gpus, 1, 4.0),
                                cwd=harness.ROOT, stderr=subprocess.DEVNULL)
        try:
            harness.wait_for_url(f"http://127.0.0.1:{args.vllm_port}/metrics", vllm)
            argv = fleet.agent_argv(HOSTNAME, args.vllm_port, args.gpus, server_url,
                                    token_file, Path(tmp) / "spool", args.interval)
            with open(log, "wb") as sink:
                agent = subprocess.Popen(argv, cwd=harness.ROOT, stdout=sink, stderr=sink)
            try:
                gross = watch_agent(agent, args.warmup, args.minutes * 60,
                                    args.gpus / args.interval)
            finally:
                harness.stop_process(agent)
            print("agent stopped; in-process breakdown ...", flush=True)
            breakdown = run_breakdown(args, server_url, token)
        finally:
            harness.stop_process(vllm)
        lines = [line for line in log.read_text(errors="replace").splitlines() if line]
    return summarise(args, gross, breakdown, lines)


def run_breakdown(args, server_url: str, token: str) -> dict:
    argv = [sys.executable, "-m", "tests.bench.agent", "--breakdown", server_url,
            "--gpus", str(args.gpus), "--interval", str(args.interval),
            "--iterations", str(args.iterations), "--vllm-port", str(args.vllm_port)]
    done = subprocess.run(argv, cwd=harness.ROOT, capture_output=True, text=True,
                          env={**os.environ, "PITWALL_BENCH_TOKEN": token})
    if done.returncode:
        raise RuntimeError(f"breakdown failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def summarise(args, gross: dict, breakdown: dict, warnings: list[str]) -> dict:
    sim_pct = breakdown["sim_share_pct"]
    net_pct = round(gross["cpu_pct"] - sim_pct, 3)
    sim_mb = sim_import_rss()
    return {
        "machine": harness.machine(), "gpus": args.gpus, "interval_s": args.interval,
        "cpu_pct_of_one_core": {"gross": gross["cpu_pct"], "sim_share": sim_pct,
                                "net": net_pct},
        "peak_rss_mb": {"gross_sampled": gross["rss_peak_mb"], "vmhwm": gross["vmhwm_mb"],
                        "sim_share": sim_mb, "net": round(gross["vmhwm_mb"] - sim_mb, 1)},
        "agent": gross,
        "breakdown": breakdown,
        "agent_log_lines": warnings[:20],
        "targets": {"cpu_pct": TARGET_CPU_PCT, "rss_mb": TARGET_RSS_MB,
                    "met": net_pct <= TARGET_CPU_PCT
                    and gross["vmhwm_mb"] - sim_mb <= TARGET_RSS_MB},
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.breakdown:  # the measurement child of run_breakdown
        print(json.dumps(breakdown(args, os.environ["PITWALL_BENCH_TOKEN"])))
        return 0
    others = harness.bench_running_elsewhere()
    if others:
        print("another benchmark is running; wait for it:\n  " + "\n  ".join(others))
        return 1
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    cpu, rss = report["cpu_pct_of_one_core"], report["peak_rss_mb"]
    print(f"target net <= {TARGET_CPU_PCT} % of a core and <= {TARGET_RSS_MB:.0f} MB: "
          f"{'met' if report['targets']['met'] else 'NOT met'} "
          f"(net {cpu['net']} %, {rss['net']} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
