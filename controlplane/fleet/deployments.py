"""Deployments: checking a desired config, versioning it, handing it to the host's agent, and
recording what the agent reports.

A config is refused here, with the field at fault named, before any agent sees it: the vLLM
arguments against the catalog of the target vLLM version (``agents.vllm_args``), the GPUs
against the host's inventory and its other deployments, the CPU binding against the host's
CPUs and NUMA nodes. Every accepted change is a ``DeploymentRevision`` (who, when, why, what
changed) and bumps the host's ``config_version``, which ingest's replies carry, so the agent
fetches the new config within a batch or two.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents import vllm_args
from controlplane.fleet.models import (
    Deployment,
    DeploymentRevision,
    DeploymentState,
    Gpu,
    Host,
)

# What the operator sets; everything else on a Deployment is reported or bookkeeping.
DESIRED_FIELDS = ("enabled", "model", "port", "gpu_indices", "vllm_version", "args", "cpus",
                  "numa_node", "env", "drain_timeout_s")
MAX_DRAIN_S = 3600
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Set by the agent from gpu_indices: a second source of truth would only disagree.
RESERVED_ENV = {"CUDA_VISIBLE_DEVICES"}
LOG_LINES = 200  # of a report's log tail, kept
# A Unix socket path holds 107 characters; vLLM's are TMPDIR + "/" + a 36-character uuid.
MAX_TMPDIR = 107 - 1 - 36


def desired_config(deployment: Deployment) -> dict:
    return {name: getattr(deployment, name) for name in DESIRED_FIELDS}


def check(deployment: Deployment) -> None:
    """Raise a ValidationError keyed by field when the desired config cannot run."""
    errors: dict[str, list[str]] = {}
    host = Host.objects.filter(pk=deployment.host_id).only("cpu_count", "numa_nodes").first()
    for field, problems in (("args", _arg_errors(deployment)),
                            ("gpu_indices", _gpu_errors(deployment)),
                            ("port", _port_errors(deployment.port)),
                            ("cpus", _cpu_errors(deployment, host)),
                            ("numa_node", _numa_errors(deployment, host)),
                            ("env", _env_errors(deployment.env)),
                            ("drain_timeout_s", _drain_errors(deployment.drain_timeout_s))):
        if problems:
            errors[field] = problems
    if errors:
        raise ValidationError(errors)


def _arg_errors(d: Deployment) -> list[str]:
    if not isinstance(d.args, dict):
        return ['must be a JSON object of vLLM arguments, e.g. {"max_num_seqs": 256}']
    return [f"{e.arg}: {e.message}" if e.arg else e.message
            for e in vllm_args.validate(d.args, d.vllm_version)]


def world_size(args: dict) -> int:
    """The GPUs a vLLM instance with these arguments uses."""
    size = 1
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        value = args.get(name, 1)
        size *= value if isinstance(value, int) and value > 0 else 1
    return size


def _gpu_errors(d: Deployment) -> list[str]:
    indices = d.gpu_indices
    if not isinstance(indices, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices):
        return ["must be a list of GPU indices on the host, e.g. [0, 1]"]
    if len(set(indices)) != len(indices):
        return ["lists a GPU twice"]
    present = set(Gpu.objects.filter(host_id=d.host_id, present=True)
                  .values_list("index", flat=True))
    if not indices:
        # vLLM's CPU build serves without GPUs; on a host that has GPUs an empty list is a
        # forgotten field, not a choice.
        return [] if not present else [
            f"must list the GPUs to use (the host has {sorted(present)}); an empty list is "
            "only for a host without GPUs (vLLM's CPU build)"]
    errors = []
    if missing := sorted(set(indices) - present):
        errors.append(f"the host has no GPU {', '.join(map(str, missing))} "
                      f"(it has {sorted(present) or 'none reported yet'})")
    need = world_size(d.args if isinstance(d.args, dict) else {})
    if len(indices) != need:
        errors.append(f"{len(indices)} GPU(s) given, but tensor_parallel_size x "
                      f"pipeline_parallel_size x data_parallel_size = {need}")
    if d.enabled:
        errors += _gpus_taken(d, indices)
    return errors


def _gpus_taken(d: Deployment, indices: list[int]) -> list[str]:
    others = Deployment.objects.filter(host_id=d.host_id, enabled=True).exclude(pk=d.pk)
    return [f"GPU {i} is already used by deployment {name!r}"
            for name, theirs in others.values_list("name", "gpu_indices")
            for i in indices if i in (theirs or [])]


def _port_errors(port: int) -> list[str]:
    return [] if 1024 <= port <= 65535 else ["must be between 1024 and 65535"]


def _cpu_errors(d: Deployment, host: Host | None) -> list[str]:
    cpus = d.cpus
    if cpus is None:
        return []
    if not isinstance(cpus, list) or not cpus or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpus):
        return ["must be null (unbound) or a non-empty list of CPU ids, e.g. [0, 1, 2, 3]"]
    count = host.cpu_count if host else None
    if count and (beyond := sorted(c for c in set(cpus) if c >= count)):
        return [f"the host has {count} CPUs (0-{count - 1}); no CPU {beyond[0]}"]
    return []


def _numa_errors(d: Deployment, host: Host | None) -> list[str]:
    if d.numa_node is None:
        return []
    ids = set(host.node_cpus()) if host else set()
    if ids and d.numa_node not in ids:
        return [f"the host has no NUMA node {d.numa_node} (it has {sorted(ids)})"]
    return []


def _env_errors(env) -> list[str]:
    if not isinstance(env, dict):
        return ['must be a JSON object of strings, e.g. {"VLLM_LOGGING_LEVEL": "INFO"}']
    errors = [f"{k!r} is not a valid variable name" for k in env if not ENV_NAME.match(k)]
    errors += [f"{k}: must be a string" for k, v in env.items() if not isinstance(v, str)]
    errors += [f"{k} is set by the agent from gpu_indices" for k in env if k in RESERVED_ENV]
    tmpdir = env.get("TMPDIR")
    if isinstance(tmpdir, str) and len(tmpdir) > MAX_TMPDIR:
        errors.append(f"TMPDIR is {len(tmpdir)} characters long: vLLM binds its ZMQ sockets at "
                      f"TMPDIR/<36-character id> and a socket path may have 107 characters at "
                      f"most, so vLLM would exit at start; use at most {MAX_TMPDIR}")
    return errors


def _drain_errors(seconds: int) -> list[str]:
    return [] if 1 <= seconds <= MAX_DRAIN_S else [f"must be between 1 and {MAX_DRAIN_S}"]


@transaction.atomic
def save(deployment: Deployment, author=None, reason: str = "") -> DeploymentRevision | None:
    """Check and store a new or changed deployment as a new revision; None when nothing of the
    desired config changed (no revision, nothing for the agent to do)."""
    # The host's row lock orders concurrent changes: two deployments cannot both take a GPU.
    Host.objects.select_for_update().filter(pk=deployment.host_id).first()
    check(deployment)
    before = _last_config(deployment)
    changed = [n for n in DESIRED_FIELDS if before is None or before.get(n) != getattr(
        deployment, n)]
    if before is not None and not changed:
        return None
    deployment.revision = 1 if deployment.pk is None else deployment.revision + 1
    deployment.updated_at = timezone.now()
    deployment.save()
    _bump(deployment.host_id)
    return DeploymentRevision.objects.create(
        deployment=deployment, revision=deployment.revision,
        config=desired_config(deployment), changed=changed, author=author, reason=reason)


def _last_config(deployment: Deployment) -> dict | None:
    if deployment.pk is None:
        return None
    return (DeploymentRevision.objects.filter(deployment=deployment)
            .order_by("-revision").values_list("config", flat=True).first())


@transaction.atomic
def revert(deployment: Deployment, revision: int, author=None,
           reason: str = "") -> DeploymentRevision | None:
    """A new revision with the desired config of an earlier one."""
    old = DeploymentRevision.objects.filter(deployment=deployment, revision=revision).first()
    if old is None:
        raise ValidationError({"revision": [f"deployment {deployment.name!r} has no revision "
                                            f"{revision}"]})
    for name in DESIRED_FIELDS:
        setattr(deployment, name, old.config.get(name, getattr(deployment, name)))
    return save(deployment, author, reason or f"revert to revision {revision}")


@transaction.atomic
def delete(deployment: Deployment) -> None:
    """The agent stops it at its next config fetch: it is no longer in the host's config."""
    host_id = deployment.host_id
    deployment.delete()
    _bump(host_id)


def _bump(host_id: int) -> None:
    Host.objects.filter(pk=host_id).update(config_version=F("config_version") + 1)


def agent_config(host_id: int) -> dict:
    """What the host's agent runs: its enabled deployments, arguments rendered as flags."""
    version = Host.objects.filter(pk=host_id).values_list("config_version", flat=True).get()
    deployments = Deployment.objects.filter(host_id=host_id, enabled=True).order_by("id")
    return {"version": version, "deployments": [_spec(d) for d in deployments]}


def _spec(d: Deployment) -> dict:
    return {"id": d.id, "name": d.name, "revision": d.revision, "model": d.model,
            "port": d.port, "gpu_indices": d.gpu_indices, "vllm_version": d.vllm_version,
            "args": d.args, "argv": render_argv(d),
            "cpus": d.cpus, "numa_node": d.numa_node, "env": d.env,
            "drain_timeout_s": d.drain_timeout_s}


def render_argv(d: Deployment) -> list[str]:
    """The deployment's vLLM flags. On releases with ``--shutdown-timeout`` the drain timeout
    is passed as it unless the arguments set it: without it vLLM aborts every running request
    on SIGTERM (0, its default) instead of letting them finish."""
    argv = vllm_args.to_argv(d.args, d.vllm_version)
    if "shutdown_timeout" in d.args or "shutdown_timeout" not in vllm_args.available(
            d.vllm_version):
        return argv
    return argv + vllm_args.to_argv({"shutdown_timeout": int(d.drain_timeout_s)},
                                    d.vllm_version)


class ForeignDeployment(Exception):
    """A report names a deployment of another host: an agent writes its own host only."""


def record_status(host_id: int, reports: Iterable[dict]) -> int:
    """Store the agent's reports (already validated in shape); ids of deleted deployments are
    skipped (the agent reports them until its next config fetch). Returns how many stored."""
    reports = list(reports)
    owners = dict(Deployment.objects.filter(id__in=[r["id"] for r in reports])
                  .values_list("id", "host_id"))
    if foreign := sorted(i for i, owner in owners.items() if owner != host_id):
        raise ForeignDeployment(f"deployment {foreign[0]} belongs to another host")
    now = timezone.now()
    for report in (r for r in reports if r["id"] in owners):
        Deployment.objects.filter(pk=report["id"]).update(reported_at=now, **_reported(report))
    return sum(1 for r in reports if r["id"] in owners)


def _reported(report: dict) -> dict:
    return {"state": report["state"], "state_since": _when(report.get("since")),
            "running_revision": report.get("revision"), "pid": report.get("pid"),
            "restarts": report.get("restarts", 0), "exit_code": report.get("exit_code"),
            "error": report.get("error") or "",
            "next_start_at": _when(report.get("next_start_at")),
            "running_argv": report.get("argv", []),
            "log_tail": report.get("log_tail", [])[-LOG_LINES:],
            "warnings": report.get("warnings", [])}


def _when(unix: float | None) -> datetime | None:
    if unix is None or not math.isfinite(unix):
        return None
    return datetime.fromtimestamp(unix, UTC)


STATES = [s.value for s in DeploymentState if s != DeploymentState.UNKNOWN]
