"""Command-line options and environment: everything the agent is told, checked once at start.

Flags win over the environment (PITWALL_SERVER, PITWALL_TOKEN, PITWALL_TOKEN_FILE). The token
is held out of ``repr`` so that no log line or traceback can print it.

An ``http://`` server that is not this machine is refused unless --allow-insecure-http says
the operator means it: the agent token travels in every request, and with --supervise the
deployments' env (model hub tokens) comes back, both readable by anyone on the path.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import ipaddress
import os
import re
import shlex
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from agents import __version__
from agents.collectors.placement_facts import (
    DEFAULT_PORT_RANGE,
    MAX_LABELS,
    ROLES,
    address_problem,
    parse_label,
    parse_port_range,
)

DEFAULT_INTERVAL = 1.0
DEFAULT_SIM_GPUS = 8
DEFAULT_SPOOL_MAX_BYTES = 256 * 1024 * 1024
# Past this an idle connection meets the server's keep-alive (uvicorn's 5 s) and every request
# reconnects; and at 1-s sampling, 10 batches make a request the server flushes at once as a
# spool replay, outside its group commit.
MAX_SEND_INTERVAL = 5.0
LOG_LEVELS = ("debug", "info", "warning", "error")
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)


class ConfigError(Exception):
    """A setting that cannot work; the message is one line for the operator."""


@dataclass(frozen=True)
class AgentConfig:
    command: str  # "run" or "probe"
    gpu_backend: str = "nvml"
    sim_gpus: int = DEFAULT_SIM_GPUS
    vllm_metrics_urls: tuple[str, ...] = ()
    interval: float = DEFAULT_INTERVAL
    # The most samples are held before they go as one batch (the server asks for up to 5 s,
    # none while someone watches this host); equal to interval: each sample sent as taken.
    send_interval: float = MAX_SEND_INTERVAL
    hostname: str = field(default_factory=socket.gethostname)
    spool_dir: Path = field(default_factory=lambda: default_spool_dir())
    spool_max_bytes: int = DEFAULT_SPOOL_MAX_BYTES
    log_level: str = "warning"
    server: str | None = None
    token: str | None = field(default=None, repr=False)
    supervise: bool = False  # run the deployments the control plane assigns to this host
    insecure_http: bool = False  # an http:// server off this machine, allowed by the flag
    vllm_command: tuple[str, ...] | None = None  # None: `vllm serve`, or the simulated vLLM
    router: bool = False  # run the vllm-routers of the services routed through this host
    router_command: tuple[str, ...] | None = None  # None: vllm-router on PATH or beside Python
    # What placement reads in the inventory (agents/collectors/placement_facts.py).
    labels: dict[str, str] = field(default_factory=dict)
    advertise_address: str | None = None  # None: the source address towards the server
    port_range: tuple[int, int] = DEFAULT_PORT_RANGE
    roles: tuple[str, ...] = ()


def default_spool_dir(euid: int | None = None, env: Mapping[str, str] = os.environ) -> Path:
    """/var/lib for a root service, the XDG state directory (~/.local/state) otherwise."""
    if (os.geteuid() if euid is None else euid) == 0:
        return Path("/var/lib/pitwall-agent/spool")
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "pitwall-agent" / "spool"


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def parse_size(text: str) -> int:
    """Bytes, with an optional binary suffix: 268435456, 256M, 256MiB, 1G."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size in bytes (e.g. 256MiB): {text!r}")
    unit = (match[2] or "b")[0].lower()
    value = int(match[1]) * {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit]
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1 byte")
    return value


def _http_url(text: str) -> str:
    url = urlsplit(text)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise argparse.ArgumentTypeError(f"not an http(s):// URL: {text!r}")
    return text


def _label(text: str) -> tuple[str, str]:
    try:
        return parse_label(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _address(text: str) -> str:
    problem = address_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _port_range(text: str) -> tuple[int, int]:
    try:
        return parse_port_range(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--gpu-backend", choices=("nvml", "sim", "none"), default="nvml",
                        help="where GPU metrics come from: NVML (default), simulated GPUs, or "
                             "none for a host without GPUs (vLLM's CPU build)")
    common.add_argument("--sim-gpus", type=_count, default=DEFAULT_SIM_GPUS, metavar="N",
                        help="GPUs to simulate with --gpu-backend sim (default %(default)s)")
    common.add_argument("--vllm-metrics-url", action="append", default=[], type=_http_url,
                        metavar="URL", dest="vllm_metrics_urls",
                        help="a vLLM /metrics URL to scrape (repeat for several engines)")
    common.add_argument("--interval", type=_positive_float, default=DEFAULT_INTERVAL,
                        metavar="S", help="seconds between samples (default 1.0)")
    common.add_argument("--hostname", default=None,
                        help="name this host reports (default: the system hostname)")
    common.add_argument("--spool-dir", type=Path, default=None,
                        help="where unsent batches wait (default ~/.local/state/pitwall-agent/"
                             "spool, or /var/lib/pitwall-agent/spool as root)")
    common.add_argument("--spool-max-bytes", type=parse_size, default=DEFAULT_SPOOL_MAX_BYTES,
                        metavar="SIZE", help="spool bound; past it the oldest batches are "
                                             "evicted and counted (default 256MiB)")
    common.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, default="warning")
    common.add_argument("--label", action="append", type=_label, default=[], metavar="KEY=VALUE",
                        dest="labels", help="a label services' selectors match, e.g. pool=batch "
                                            f"(repeat; at most {MAX_LABELS})")
    common.add_argument("--advertise-address", type=_address, default=None, metavar="ADDR",
                        help="the address other hosts (a service's router) reach this host's "
                             "vLLM servers at (default: this host's address towards the "
                             "server, else its hostname)")
    common.add_argument("--port-range", type=_port_range, default=DEFAULT_PORT_RANGE,
                        metavar="LOW-HIGH", help="the ports placement may give services' "
                                                 "replicas here (default 8000-8999)")

    parser = argparse.ArgumentParser(
        prog="pitwall-agent",
        description="Sample GPUs, the host and vLLM engines; stream them to Pitwall.")
    parser.add_argument("--version", action="version", version=f"pitwall-agent {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", parents=[common], help="stream samples to the server")
    run.add_argument("--server", metavar="URL", type=_http_url,
                     help="control plane base URL (env PITWALL_SERVER)")
    token = run.add_mutually_exclusive_group()
    token.add_argument("--token", help="agent token (env PITWALL_TOKEN; prefer --token-file: "
                                       "command lines are visible to other users)")
    token.add_argument("--token-file", type=Path, metavar="PATH",
                       help="file holding the agent token (env PITWALL_TOKEN_FILE)")
    run.add_argument("--send-interval", type=_positive_float, default=None, metavar="S",
                     help="hold samples at most S seconds, to send them as one batch in one "
                          "request, while the server asks for it (it asks for none while a "
                          "page watches this host); from --interval (each sample sent as it is "
                          f"taken) to {MAX_SEND_INTERVAL:g} (the default)")
    run.add_argument("--allow-insecure-http", action="store_true",
                     help="accept an http:// server that is not this machine (the token and "
                          "the deployments' env travel in clear; for a private network only)")
    run.add_argument("--supervise", action="store_true",
                     help="run the vLLM deployments the control plane assigns to this host "
                          "(desired config; docs/deployments.md)")
    run.add_argument("--vllm-command", metavar="CMD", default=None,
                     help='how to start vLLM, followed by the model and flags (default '
                          '"vllm serve"; with --gpu-backend sim, the simulated vLLM)')
    run.add_argument("--router", action="store_true",
                     help="run the vllm-router of each service the control plane routes "
                          "through this host, its workers kept to the replicas in rotation "
                          "(docs/agent.md)")
    run.add_argument("--router-command", metavar="CMD", default=None,
                     help='how to start vllm-router; the agent adds its flags (default '
                          '"vllm-router" on PATH, else the one beside this Python)')
    commands.add_parser("probe", parents=[common],
                        help="collect one interval and print the batch as JSON")
    return parser


def config_from_args(args: argparse.Namespace,
                     env: Mapping[str, str] = os.environ) -> AgentConfig:
    config = AgentConfig(
        command=args.command,
        gpu_backend=args.gpu_backend,
        sim_gpus=args.sim_gpus,
        vllm_metrics_urls=tuple(args.vllm_metrics_urls),
        interval=args.interval,
        hostname=args.hostname or socket.gethostname(),
        spool_dir=args.spool_dir or default_spool_dir(env=env),
        spool_max_bytes=args.spool_max_bytes,
        log_level=args.log_level,
        labels=_labels(args.labels),
        advertise_address=args.advertise_address,
        port_range=args.port_range,
        # --router (the router flags) makes this host one that may serve services' routers.
        roles=tuple(role for role in ROLES if getattr(args, role, False) is True),
    )
    if args.command != "run":
        return config
    server = args.server or env.get("PITWALL_SERVER")
    if not server:
        raise ConfigError("no server: pass --server URL or set PITWALL_SERVER")
    try:
        _http_url(server)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"PITWALL_SERVER: {exc}") from None
    token = read_token(args.token, args.token_file, env)
    insecure = not is_private_channel(server)
    if insecure and not args.allow_insecure_http:
        raise ConfigError(
            f"refusing {server}: over http:// to another machine the agent token (and, with "
            "--supervise, the deployments' env) travels in clear; use https://, or pass "
            "--allow-insecure-http if this network is private")
    return dataclasses.replace(config, server=server, token=token, supervise=args.supervise,
                               send_interval=_send_interval(args.send_interval, args.interval),
                               vllm_command=_command(args.vllm_command, "--vllm-command"),
                               router=args.router,
                               router_command=_command(args.router_command, "--router-command"),
                               insecure_http=insecure)


def _send_interval(send_interval: float | None, interval: float) -> float:
    if send_interval is None:
        return max(interval, MAX_SEND_INTERVAL)
    if not interval <= send_interval <= MAX_SEND_INTERVAL:
        raise ConfigError(f"--send-interval {send_interval:g}: must be at least --interval "
                          f"({interval:g} s) and at most {MAX_SEND_INTERVAL:g} s")
    return send_interval


def _command(text: str | None, flag: str) -> tuple[str, ...] | None:
    if text is None:
        return None
    command = tuple(shlex.split(text))
    if not command:
        raise ConfigError(f"{flag} is empty")
    return command


def _labels(pairs: list[tuple[str, str]]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, value in pairs:
        if labels.get(key, value) != value:
            raise ConfigError(f"--label {key} is given twice, as {labels[key]!r} and {value!r}")
        labels[key] = value
    if len(labels) > MAX_LABELS:
        raise ConfigError(f"{len(labels)} labels: at most {MAX_LABELS}")
    return labels


def is_private_channel(url: str) -> bool:
    """https://, or http:// to this machine (loopback; 0.0.0.0, which Linux connects to the
    machine itself; one of its own interfaces' addresses, which the kernel delivers without a
    network): nothing leaves the host in clear."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return True
    host = (parts.hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: it may resolve anywhere
    return address.is_loopback or address.is_unspecified or address in own_addresses()


def own_addresses() -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """This machine's interface addresses (a dev stack served on its LAN address)."""
    found = set()
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            with contextlib.suppress(ValueError):  # MAC addresses, scoped link-local ones
                found.add(ipaddress.ip_address(entry.address))
    return found


def read_token(token: str | None, token_file: Path | None,
               env: Mapping[str, str] = os.environ) -> str:
    """The token from the flags, else the environment; never echoed in an error."""
    if token is None and token_file is None:
        token = env.get("PITWALL_TOKEN") or None
        token_file = Path(env["PITWALL_TOKEN_FILE"]) if env.get("PITWALL_TOKEN_FILE") else None
    if token is None and token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the token file {token_file}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"the token file {token_file} is empty")
    if not token:
        raise ConfigError("no agent token: pass --token-file PATH (or --token, or set "
                          "PITWALL_TOKEN_FILE / PITWALL_TOKEN)")
    if not (token.isascii() and token.isprintable()):
        # It travels in an HTTP header: say so now rather than fail on every send.
        raise ConfigError("the agent token holds characters an HTTP header cannot carry")
    return token
