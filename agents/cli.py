"""``pitwall-agent run`` streams batches to the control plane; ``probe`` prints one batch.

Collectors are imported inside functions: each is optional at run time (a host without an NVIDIA
driver still reports its CPU and engines), and a missing one costs a warning, not the agent.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from agents import __version__
from agents.batch import BatchBuilder
from agents.collectors.base import Warn, stderr_warn
from agents.config import AgentConfig, ConfigError, build_parser, config_from_args
from agents.control import ControlClient
from agents.loop import Loop, Sampler, Sources, probe, samples_in_hold
from agents.reconcile import EngineSet, Reconciler
from agents.router.supervisor import RouterSupervisor
from agents.spool import Spool
from agents.supervisor.launch import DEFAULT_COMMAND
from agents.supervisor.supervisor import Supervisor
from agents.transport import IngestClient, Shipper

log = logging.getLogger("agents")
# The simulated vLLM takes `vllm serve`'s flags after its --model (agents/sim/vllm_server.py).
SIM_VLLM_COMMAND = (sys.executable, "-m", "agents.sim.vllm_server", "--model")


class StartupError(Exception):
    """The agent cannot start as configured; the message is one line for the operator."""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed usage (bad flag: 2) or help (0)
        return exc.code if isinstance(exc.code, int) else 2
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="pitwall-agent: %(levelname)s: %(message)s")
    warn: Warn = stderr_warn if args.log_level != "error" else _silent
    try:
        config = config_from_args(args)
        if config.command == "probe":
            return probe_command(config, warn)
        return run_command(config, warn)
    except (ConfigError, StartupError) as exc:
        print(f"pitwall-agent: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were in place
        return 130


def _silent(message: str) -> None:
    pass


def probe_command(config: AgentConfig, warn: Warn) -> int:
    sources = build_sources(config, warn, require_gpus=False)
    try:
        batch = probe(Sampler(sources, warn), BatchBuilder(), config.interval)
    except KeyboardInterrupt:
        return 130
    finally:
        sources.close()
    print(json.dumps(batch, indent=2))
    return 0


def run_command(config: AgentConfig, warn: Warn) -> int:
    assert config.server is not None and config.token is not None
    sources = build_sources(config, warn, require_gpus=True)
    try:
        spool = Spool(config.spool_dir, config.spool_max_bytes, warn)
    except OSError as exc:
        sources.close()
        raise StartupError(f"cannot use the spool directory {config.spool_dir}: "
                           f"{exc.strerror or exc}") from None
    if config.insecure_http:
        warn(f"sending the agent token to {config.server} over plain http:// "
             "(--allow-insecure-http): anyone on the network path can read it")
    builder = BatchBuilder()
    shipper = _AnnouncingShipper(IngestClient(config.server, config.token), spool,
                                 inventory=lambda: builder.inventory,
                                 on_inventory_needed=builder.inventory_needed, warn=warn)
    loop = Loop(Sampler(sources, warn), builder, shipper.submit, config.interval, warn,
                samples_per_batch=lambda: samples_per_batch(config, shipper.hold_s))
    log.info("pitwall-agent %s on %s: sampling every %s s, sending to %s, holding samples up "
             "to %s s when it asks; spool %s holds %d batches", __version__, config.hostname,
             config.interval, config.server, config.send_interval, config.spool_dir,
             len(spool))
    stop = threading.Event()
    supervision = None
    if config.supervise or config.router:
        supervision = _supervision(config, sources, shipper, warn)
        shipper.on_new_config_version = supervision.reconciler.poke
    with _stop_on_signals(stop):
        shipper.start()
        if supervision is not None:
            supervision.start(stop)
        try:
            loop.run(stop)
        finally:
            if supervision is not None:
                supervision.close()
            shipper.close(timeout=5.0)
            sources.close()
        # Said while SIGTERM is still ours: a second one (systemd, a harness) must not kill
        # the process between the spooling above and this line.
        _log_stop(builder, shipper, spool)
    return 0


def samples_per_batch(config: AgentConfig, hold_s: float) -> int:
    """How many samples go in one batch (one request): those of the hold the server's last
    reply asked for (``hold_s``; 0 before the first reply, and while a page watches this
    host), at most ``--send-interval``'s; 1: each sample sent as it is taken."""
    return samples_in_hold(hold_s, config.send_interval, config.interval)


def _log_stop(builder: BatchBuilder, shipper: Shipper, spool: Spool) -> None:
    """One line an operator (and the fault suite) can account by: every batch this run made is
    delivered, dropped (refused for good), evicted from the spool or still waiting in it."""
    evicted = spool.evictions()
    log.info("stopped: boot %s made %d batches (seq 1-%d); %d delivered, %d dropped, "
             "%d evicted and not yet reported; %d batches wait in the spool",
             builder.boot_id, builder.seq, builder.seq, shipper.delivered_batches,
             shipper.dropped_batches, evicted[0], len(spool))


class _AnnouncingShipper(Shipper):
    """The sender, ringing the control loop the moment an ingest reply carries a newer
    config_version: the fetch (and a replica's removal from its router) then follows within
    milliseconds rather than at the loop's next second."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.on_new_config_version: Callable[[], None] = lambda: None
        self._config_version: int | None = None
        super().__init__(*args, **kwargs)

    @property
    def config_version(self) -> int | None:
        return self._config_version

    @config_version.setter
    def config_version(self, value: int | None) -> None:
        changed = value is not None and value != self._config_version
        self._config_version = value
        if changed:
            self.on_new_config_version()


class _Supervision:
    """The supervisors and their control loop, on a thread of their own (reconcile.py)."""

    def __init__(self, reconciler: Reconciler) -> None:
        self.reconciler = reconciler
        self.thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self.thread = threading.Thread(target=self.reconciler.run, args=(stop,),
                                       name="supervisor", daemon=True)
        self.thread.start()

    def close(self) -> None:
        """vLLM instances drain and stop with the agent, then the routers (forwarding to
        replicas elsewhere meanwhile): nothing outlives it unsupervised."""
        self.reconciler.poke()  # stop is set: the loop's wait ends now
        if self.thread is not None:
            self.thread.join(timeout=5.0)
        if self.reconciler.supervisor is not None:
            self.reconciler.supervisor.close()
        if self.reconciler.routers is not None:
            self.reconciler.routers.close()


def _supervision(config: AgentConfig, sources: Sources, shipper: Shipper,
                 warn: Warn) -> _Supervision:
    assert config.server is not None and config.token is not None
    supervisor, engines, routers = None, None, None
    if config.supervise:
        simulated = config.gpu_backend == "sim"
        command = list(config.vllm_command
                       or (SIM_VLLM_COMMAND if simulated else DEFAULT_COMMAND))
        nvml = getattr(sources.gpus, "_nvml", None) if simulated else None
        engines = EngineSet(sources, lambda url: _vllm_collector(url, warn),
                            list(config.vllm_metrics_urls), nvml, _sim_state_source())
        log.info("supervising vLLM deployments with: %s", " ".join(command))
        supervisor = Supervisor(command, secrets=(config.token,))
    if config.router:
        routers = RouterSupervisor(
            None if config.router_command is None else list(config.router_command),
            secrets=(config.token,))
        log.info("running services' routers with: %s", " ".join(routers.command))
    return _Supervision(Reconciler(ControlClient(config.server, config.token), supervisor,
                                   lambda: shipper.config_version, engines, warn,
                                   routers=routers))


def _sim_state_source() -> Callable[[str], Any] | None:
    try:
        from agents.sim.sim_nvml_state import http_state_source
    except ImportError:  # the simulation is not installed: real GPUs only
        return None
    return http_state_source


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT end the loop; the unsent batches then go to the spool.

    The handler only writes a byte to a pipe and a thread of its own sets ``stop``: a handler
    that set the Event itself would deadlock if the signal came while the main thread held
    that Event's lock (inside ``stop.wait``), leaving the agent deaf to SIGTERM."""
    handled = (signal.SIGTERM, signal.SIGINT)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    relay = threading.Thread(target=_relay, args=(read_fd, stop), name="signals", daemon=True)
    try:
        previous = {sig: signal.signal(sig, lambda *_: _poke(write_fd)) for sig in handled}
    except ValueError:  # not the main thread (embedded use): the caller stops us
        previous = {}
    relay.start()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(write_fd)  # the relay reads end-of-file and ends
        relay.join(timeout=1.0)
        os.close(read_fd)


def _poke(write_fd: int) -> None:
    # Non-blocking: a storm of signals fills the pipe, and stop is set already by then.
    with suppress(OSError):
        os.write(write_fd, b"\0")


def _relay(read_fd: int, stop: threading.Event) -> None:
    if os.read(read_fd, 1):  # b"" when the context ends without a signal
        stop.set()


def build_sources(config: AgentConfig, warn: Warn, require_gpus: bool) -> Sources:
    from agents.collectors.numa import pci_numa_node

    sources = Sources(simulated=config.gpu_backend == "sim", numa_node=pci_numa_node,
                      hostname=config.hostname)
    sources.gpus = _gpu_collector(config, warn, require_gpus)
    sources.host = _optional("host", warn, lambda: _host_collector(config, warn))
    sources.processes = _optional("processes", warn, lambda: _process_collector(warn))
    for url in config.vllm_metrics_urls:
        engine = _optional(f"vllm {url}", warn, lambda url=url: _vllm_collector(url, warn))
        if engine is not None:
            sources.engines.append(engine)
    return sources


class _HeldWarnings:
    """Holds a collector's start-up warnings until we know whether to show them."""

    def __init__(self) -> None:
        self.held: list[str] = []
        self.target: Warn | None = None

    def __call__(self, message: str) -> None:
        if self.target is None:
            self.held.append(message)
        else:
            self.target(message)

    def release(self, target: Warn) -> None:
        self.target = target
        for message in self.held:
            target(message)


def _gpu_collector(config: AgentConfig, warn: Warn, require: bool) -> Any:
    from agents.collectors.nvml import NvmlCollector

    if config.gpu_backend == "none":
        return None  # said, not guessed: `run` otherwise refuses to start without NVML
    if config.gpu_backend == "sim":
        try:
            from agents.sim.gpus import SimNvml
        except ImportError as exc:
            raise StartupError(_no_simulator(exc)) from None
        nvml = SimNvml.for_host(config.hostname, config.sim_gpus,
                                list(config.vllm_metrics_urls))
        return NvmlCollector(nvml=nvml, warn=warn)
    held = _HeldWarnings()
    collector = _optional("nvml", warn, lambda: NvmlCollector(warn=held))
    if collector is not None and getattr(collector, "available", True):
        held.release(warn)
        return collector
    reason = "; ".join(held.held) or "the NVML collector did not start"
    advice = ("install the NVIDIA driver (libnvidia-ml), use --gpu-backend none on a host "
              "without GPUs, or --gpu-backend sim to simulate GPUs")
    if require:
        raise StartupError(f"NVML is not available ({reason}): {advice}")
    warn(f"NVML is not available ({reason}); continuing without GPUs: {advice}")
    return None


def _no_simulator(exc: ImportError) -> str:
    message = f"the simulated GPU backend is unavailable ({exc})"
    if (exc.name or "").startswith("agents.sim"):  # not a module the simulator itself needs
        message += ("; the pitwall-agent distribution leaves the simulator out: simulate GPUs "
                    "from a checkout (make install, then .venv/bin/pitwall-agent)")
    return message


def _optional(source: str, warn: Warn, make: Callable[[], Any]) -> Any:
    try:
        return make()
    except Exception as exc:  # a collector that cannot start: its metrics are absent
        warn(f"{source}: unavailable ({type(exc).__name__}: {exc}); its metrics are absent")
        return None


def _host_collector(config: AgentConfig, warn: Warn) -> Any:
    from agents.collectors.hf_cache import HfCache
    from agents.collectors.host import HostCollector, HostFacts

    facts = HostFacts(config.labels, config.advertise_address, config.server,
                      config.port_range, config.roles)
    return HostCollector(warn=warn, facts=facts, hf_cache=HfCache(warn=warn))


def _process_collector(warn: Warn) -> Any:
    from agents.collectors.process import ProcessCollector

    return ProcessCollector(warn=warn)


def _vllm_collector(url: str, warn: Warn) -> Any:
    from agents.collectors.vllm import VllmCollector

    return VllmCollector(url, warn=warn)
