"""Deployments: checking a desired config, versioning it, handing it to the host's agent, and
recording what the agent reports.

A config is refused here, with the field at fault named, before any agent sees it: the vLLM
arguments against the catalog of the target vLLM version (``agents.vllm_args``), the GPUs
against the host's inventory and its other deployments, the CPU binding against the host's
CPUs and NUMA nodes. Every accepted change is a ``DeploymentRevision`` (who, when, why, what
changed) and bumps the host's ``config_version``, which ingest's replies carry, so the agent
fetches the new config within a batch or two.

A deployment is code execution on a GPU host, so (docs/security.md):

- no value may read as an option on vLLM's command line (``-`` first), the model included;
- ``env`` names are ``[A-Z_][A-Z0-9_]*``, at most ``MAX_ENV_VARS`` of them, values at most
  ``MAX_ENV_VALUE`` characters; loader variables (``agents.vllm_args_catalog.LOADER_ENV``:
  ``LD_PRELOAD``, ``PYTHONPATH`` ...) are refused unless ``PITWALL_DEPLOY_ALLOW_LOADER_ENV``;
- a config that loads code (an argument marked ``loads_code``, a loader variable) is written
  only by holders of ``fleet.deploy_code``, but for changes that cannot change which code
  runs (``NEUTRAL_FIELDS`` and numeric, switch and choice arguments);
- so is a variable that routes credentials (``env_routes``: ``HF_ENDPOINT``, proxies, CA
  bundles ...), set or changed; anyone who may write may remove one;
- env values are write-only: every reader sees ``REDACTED``, revisions keep only the redacted
  form (a revert keeps the values the deployment holds), a write that sends ``REDACTED`` back
  for a key keeps its stored value, and only the host's agent gets the values
  (``agent_config``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents import vllm_args
from controlplane.fleet import env_routes
from controlplane.fleet.models import (
    Deployment,
    DeploymentRevision,
    DeploymentState,
    Gpu,
    Host,
    Service,
)

# What the operator sets; everything else on a Deployment is reported or bookkeeping.
DESIRED_FIELDS = ("enabled", "model", "port", "gpu_indices", "vllm_version", "args", "cpus",
                  "numa_node", "env", "drain_timeout_s")
MAX_DRAIN_S = 3600
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*\Z")
MAX_ENV_NAME = 128
MAX_ENV_VARS = 64
MAX_ENV_VALUE = 4096
# What every reader (API, pages, revisions) sees of an env value; sent back, it keeps the value.
REDACTED = "<redacted>"
# Set by the agent from gpu_indices: a second source of truth would only disagree.
RESERVED_ENV = {"CUDA_VISIBLE_DEVICES"}
DEPLOY_CODE = "fleet.deploy_code"
ALLOW_LOADER_ENV = "DEPLOY_ALLOW_LOADER_ENV"  # settings.PITWALL key (PITWALL_DEPLOY_ALLOW_...)
# Fields whose change cannot change which code a deployment runs: open to writers without
# fleet.deploy_code even when the config loads code. So are the numeric, switch and choice
# arguments (not the strings: tokenizer, revision, download_dir... name what is loaded).
NEUTRAL_FIELDS = ("enabled", "port", "gpu_indices", "vllm_version", "cpus", "numa_node",
                  "drain_timeout_s")
LOG_LINES = 200  # of a report's log tail, kept
# A Unix socket path holds 107 characters; vLLM's are TMPDIR + "/" + a 36-character uuid.
MAX_TMPDIR = 107 - 1 - 36


class CodeNotPermitted(ValidationError):
    """A change that would make the deployment load code the writer chose, by a writer without
    fleet.deploy_code; keyed by field like a ValidationError (the API answers 403)."""


class OwnedByService(ValidationError):
    """A change to a service's replica made as to a deployment of its own: a replica changes
    only through its service (services.py passes ``owner=``), keyed ``service``."""


def _check_owner(deployment: Deployment, owner) -> None:
    """Refuse the change of a replica unless its own service makes it. The stored row counts
    as much as the instance: clearing ``service`` on an instance frees nothing."""
    stored = (Deployment.objects.filter(pk=deployment.pk).values_list("service_id", flat=True)
              .first() if deployment.pk is not None else None)
    service_id = stored or deployment.service_id
    if service_id is None or (owner is not None and owner.pk == service_id):
        return
    name = Service.objects.filter(pk=service_id).values_list("name", flat=True).first()
    raise OwnedByService({"service": [
        f"replica of service {name!r}: change the service instead "
        f"(/api/v1/services/{service_id}/)"]})


def desired_config(deployment: Deployment) -> dict:
    """The desired config as revisions keep it and pages show it: env values redacted."""
    config = {name: getattr(deployment, name) for name in DESIRED_FIELDS}
    return redacted_config(config)


def redacted_config(config: dict) -> dict:
    """`config` with its env values replaced by REDACTED (also for revisions written before
    values were redacted)."""
    if not isinstance(config, dict) or not isinstance(config.get("env"), dict):
        return config
    return {**config, "env": redact_env(config["env"])}


def redact_env(env) -> dict:
    return {name: REDACTED for name in env} if isinstance(env, dict) else env


def resolve_env(env, stored) -> dict:
    """`env` with each REDACTED value replaced by the stored value of that key, if any (a
    REDACTED that is left is refused by `check`)."""
    if not isinstance(env, dict) or not isinstance(stored, dict):
        return env
    return {name: stored[name] if value == REDACTED and name in stored else value
            for name, value in env.items()}


def code_loading(config: dict) -> dict[str, list[str]]:
    """What in a desired config makes vLLM load code of the writer's choosing."""
    args, env = config.get("args"), config.get("env")
    return {"args": vllm_args.code_loading_args(args) if isinstance(args, dict) else [],
            "env": vllm_args.loader_env(env) if isinstance(env, dict) else []}


def loader_env_allowed() -> bool:
    return bool(settings.PITWALL[ALLOW_LOADER_ENV])


def check(deployment: Deployment) -> None:
    """Raise a ValidationError keyed by field when the desired config cannot run."""
    errors: dict[str, list[str]] = {}
    host = Host.objects.filter(pk=deployment.host_id).only("cpu_count", "numa_nodes").first()
    for field, problems in (("model", model_errors(deployment.model)),
                            ("args", arg_errors(deployment.args, deployment.vllm_version)),
                            ("gpu_indices", _gpu_errors(deployment)),
                            ("port", port_errors(deployment.port)),
                            ("cpus", _cpu_errors(deployment, host)),
                            ("numa_node", _numa_errors(deployment, host)),
                            ("env", env_errors(deployment.env)),
                            ("drain_timeout_s", drain_errors(deployment.drain_timeout_s))):
        if problems:
            errors[field] = problems
    if errors:
        raise ValidationError(errors)


# The checks below serve services too (services.check): a service's replica config is a
# deployment's, less the host, GPUs, port and CPUs that placement chooses.


def model_errors(model) -> list[str]:
    if isinstance(model, str) and vllm_args.option_like(model):
        return [f"{model!r} would be read as an option (it starts with '-'): give the model's "
                "name or path"]
    return []


def arg_errors(args, vllm_version: str) -> list[str]:
    if not isinstance(args, dict):
        return ['must be a JSON object of vLLM arguments, e.g. {"max_num_seqs": 256}']
    return [f"{e.arg}: {e.message}" if e.arg else e.message
            for e in vllm_args.validate(args, vllm_version)]


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


def port_errors(port: int) -> list[str]:
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


def env_errors(env) -> list[str]:
    if not isinstance(env, dict):
        return ['must be a JSON object of strings, e.g. {"VLLM_LOGGING_LEVEL": "INFO"}']
    if len(env) > MAX_ENV_VARS:
        return [f"{len(env)} variables: at most {MAX_ENV_VARS}"]
    errors = [f"{k!r} is not a valid variable name (upper-case letters, digits and _, not "
              f"first a digit, at most {MAX_ENV_NAME} characters)"
              for k in env if not ENV_NAME.match(k) or len(k) > MAX_ENV_NAME]
    errors += [f"{k}: must be a string" for k, v in env.items() if not isinstance(v, str)]
    errors += [f"{k}: at most {MAX_ENV_VALUE} characters" for k, v in env.items()
               if isinstance(v, str) and len(v) > MAX_ENV_VALUE]
    errors += [f"{k}: holds a NUL character" for k, v in env.items()
               if isinstance(v, str) and "\x00" in v]
    errors += [f"{k}: {REDACTED} stands for the value the deployment holds, and it holds none "
               "for this variable: send the value" for k, v in env.items() if v == REDACTED]
    errors += [f"{k} is set by the agent from gpu_indices" for k in env if k in RESERVED_ENV]
    if not loader_env_allowed():
        errors += [f"{k} makes vLLM load code it names (a loader variable); this control plane "
                   "refuses them (PITWALL_DEPLOY_ALLOW_LOADER_ENV is off)"
                   for k in vllm_args.loader_env(env)]
    tmpdir = env.get("TMPDIR")
    if isinstance(tmpdir, str) and len(tmpdir) > MAX_TMPDIR:
        errors.append(f"TMPDIR is {len(tmpdir)} characters long: vLLM binds its ZMQ sockets at "
                      f"TMPDIR/<36-character id> and a socket path may have 107 characters at "
                      f"most, so vLLM would exit at start; use at most {MAX_TMPDIR}")
    return errors


def drain_errors(seconds: int) -> list[str]:
    return [] if 1 <= seconds <= MAX_DRAIN_S else [f"must be between 1 and {MAX_DRAIN_S}"]


def permission_problems(before: dict | None, after: dict) -> dict[str, list[str]]:
    """What a writer without fleet.deploy_code may not change from `before` (None: a new
    deployment) to `after`, keyed by field; empty when nothing."""
    loads = code_loading(after)
    what = ", ".join(loads["args"] + loads["env"])
    errors: dict[str, list[str]] = {}
    for field in DESIRED_FIELDS:
        old = before.get(field) if before is not None else None
        new = after.get(field)
        if field in ("args", "env"):
            problems = _keyed_problems(field, old, new, loads[field], what)
        elif field in NEUTRAL_FIELDS or not what or (before is not None and old == new):
            problems = []
        else:
            problems = [f"this deployment loads code ({what}): changing {field} needs the "
                        f"permission {DEPLOY_CODE}"]
        if problems:
            errors[field] = problems
    return errors


def _keyed_problems(field: str, old, new, loading: list[str], what: str) -> list[str]:
    old = old if isinstance(old, dict) else {}
    new = new if isinstance(new, dict) else {}
    problems = []
    for key in sorted(set(old) | set(new), key=str):
        if key in new and key in old and new[key] == old[key]:
            continue
        if key in loading:
            kind = "loads code it names" if field == "args" else "is a loader variable"
            problems.append(f"{key}: {kind}; setting it needs the permission {DEPLOY_CODE}")
        elif field == "env" and key in new and env_routes.routes_credentials(key):
            problems.append(f"{key}: decides where the deployment's credentials are sent or "
                            f"whom its TLS trusts; setting it needs the permission "
                            f"{DEPLOY_CODE} (removing it does not)")
        elif what and not (field == "args" and _neutral_arg(key)) and not _dropped_loader(
                field, key, new):
            problems.append(f"{key}: this deployment loads code ({what}): changing it needs "
                            f"the permission {DEPLOY_CODE}")
    return problems


def _neutral_arg(name: str) -> bool:
    spec = vllm_args.CATALOG.get(name)
    return spec is not None and spec.kind not in ("str", "strs") and not spec.loads_code


def _dropped_loader(field: str, key: str, new: dict) -> bool:
    """Removing (or switching off) something that loads code is always allowed."""
    if field == "args":
        spec = vllm_args.CATALOG.get(key)
        return bool(spec and spec.loads_code) and new.get(key, False) is False
    return key not in new and bool(vllm_args.loader_env({key: ""}))


def may_load_code(author) -> bool:
    """None is Pitwall itself (make run's demo fleet, a service without a user)."""
    return author is None or bool(author.has_perm(DEPLOY_CODE))


def _stored(deployment: Deployment) -> dict | None:
    if deployment.pk is None:
        return None
    return Deployment.objects.filter(pk=deployment.pk).values(*DESIRED_FIELDS).first()


@transaction.atomic
def save(deployment: Deployment, author=None, reason: str = "",
         owner=None) -> DeploymentRevision | None:
    """Check and store a new or changed deployment as a new revision; None when nothing of the
    desired config changed (no revision, nothing for the agent to do). An env value of
    REDACTED keeps the stored value; CodeNotPermitted when `author` may not make the change;
    OwnedByService for a service's replica unless `owner` is that service."""
    _check_owner(deployment, owner)
    # The host's row lock orders concurrent changes: two deployments cannot both take a GPU.
    Host.objects.select_for_update().filter(pk=deployment.host_id).first()
    before = _stored(deployment)
    deployment.env = resolve_env(deployment.env, (before or {}).get("env") or {})
    check(deployment)
    after = {name: getattr(deployment, name) for name in DESIRED_FIELDS}
    if not may_load_code(author) and (problems := permission_problems(before, after)):
        raise CodeNotPermitted(problems)
    changed = [n for n in DESIRED_FIELDS if before is None or before.get(n) != after[n]]
    if before is not None and not changed:
        return None
    if before is not None and "env" in changed:
        changed += [f"env.{k}" for k in env_diff(before.get("env") or {}, after["env"])]
    deployment.revision = 1 if deployment.pk is None else deployment.revision + 1
    deployment.updated_at = timezone.now()
    deployment.save()
    _bump(deployment.host_id)
    return DeploymentRevision.objects.create(
        deployment=deployment, revision=deployment.revision,
        config=desired_config(deployment), changed=changed, author=author, reason=reason)


def env_diff(old: dict, new: dict) -> list[str]:
    """The variables added, removed or given another value: revisions show which, not how."""
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def lost_env(revision_env, held) -> list[str]:
    """The variables a revision sets whose value is gone: revisions keep REDACTED only, and
    the deployment (or service) no longer holds a value to keep."""
    held = held if isinstance(held, dict) else {}
    return sorted(k for k, v in (revision_env if isinstance(revision_env, dict) else {}).items()
                  if v == REDACTED and k not in held)


@transaction.atomic
def revert(deployment: Deployment, revision: int, author=None,
           reason: str = "") -> DeploymentRevision | None:
    """A new revision with the desired config of an earlier one (a replica's: refused, its
    service has revisions of its own)."""
    _check_owner(deployment, None)
    old = DeploymentRevision.objects.filter(deployment=deployment, revision=revision).first()
    if old is None:
        raise ValidationError({"revision": [f"deployment {deployment.name!r} has no revision "
                                            f"{revision}"]})
    if lost := lost_env(old.config.get("env"), deployment.env):
        raise ValidationError({"env": [
            f"{', '.join(lost)}: revision {revision} does not keep env values (they are "
            "write-only) and the deployment no longer holds one: set it first, then revert"]})
    for name in DESIRED_FIELDS:
        setattr(deployment, name, old.config.get(name, getattr(deployment, name)))
    return save(deployment, author, reason or f"revert to revision {revision}")


@transaction.atomic
def delete(deployment: Deployment, owner=None) -> None:
    """The agent stops it at its next config fetch: it is no longer in the host's config.
    OwnedByService for a service's replica unless `owner` is that service."""
    _check_owner(deployment, owner)
    host_id = deployment.host_id
    deployment.delete()
    _bump(host_id)


def _bump(host_id: int) -> None:
    Host.objects.filter(pk=host_id).update(config_version=F("config_version") + 1)


def agent_config(host_id: int) -> dict:
    """What the host's agent runs: its enabled deployments, arguments rendered as flags, and
    the routers of the services it routes (``routing.router_specs``)."""
    from controlplane.fleet import routing  # routing imports this module

    version = Host.objects.filter(pk=host_id).values_list("config_version", flat=True).get()
    deployments = Deployment.objects.filter(host_id=host_id, enabled=True).order_by("id")
    return {"version": version, "deployments": [_spec(d) for d in deployments],
            "routers": routing.router_specs(host_id)}


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


# The phases of a start an agent reports (agents/supervisor/phases.py), in order.
START_PHASES = ("process_start", "weights_loaded", "kv_profiled", "graphs_captured",
                "api_ready")


def _reported(report: dict) -> dict:
    return {"state": report["state"], "state_since": _when(report.get("since")),
            "running_revision": report.get("revision"), "pid": report.get("pid"),
            "restarts": report.get("restarts", 0), "exit_code": report.get("exit_code"),
            "error": report.get("error") or "",
            "next_start_at": _when(report.get("next_start_at")),
            "running_argv": report.get("argv", []),
            "log_tail": report.get("log_tail", [])[-LOG_LINES:],
            "warnings": report.get("warnings", []),
            # An agent from before phases sends none: nothing known of this start.
            "start_phases": {name: report["phases"][name] for name in START_PHASES
                             if name in report.get("phases", {})}}


def _when(unix: float | None) -> datetime | None:
    """The serializer bounds the times; out of range here is None, never an error."""
    if unix is None or not math.isfinite(unix):
        return None
    try:
        return datetime.fromtimestamp(unix, UTC)
    except (OverflowError, OSError, ValueError):
        return None


STATES = [s.value for s in DeploymentState if s != DeploymentState.UNKNOWN]
