"""Deployments (desired config, reported state, revisions) and the agent's side of them."""

from __future__ import annotations

import math

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied

from agents import vllm_args
from controlplane.api.serializers.alerts import drf_errors
from controlplane.api.serializers.desired import CheckedDraft
from controlplane.api.serializers.fields import ObjectField, StringListField
from controlplane.fleet import deployments
from controlplane.fleet.models import Deployment, DeploymentRevision, Host

_INTS = {"type": "array", "items": {"type": "integer"}}
# Bounds of what the agent reports, as the columns hold them: out of range is a 400, not a 500.
MAX_INT32 = 2**31 - 1
MAX_BIGINT = 2**63 - 1
# Unix seconds an agent may report: 1970 to 2100 (a clock that far off is a bug to refuse).
MAX_UNIX_S = 4102444800.0


@extend_schema_field(_INTS)
class IntListField(serializers.JSONField):
    pass


@extend_schema_field({**_INTS, "nullable": True})
class NullableIntListField(serializers.JSONField):
    """A list of ints or null (the schema says nullable: the field must take it too)."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)


class DeploymentStatusSerializer(serializers.ModelSerializer):
    """What the host's agent last reported of the process."""

    since = serializers.DateTimeField(source="state_since", read_only=True)
    argv = StringListField(source="running_argv", read_only=True)
    log_tail = StringListField(read_only=True, help_text="The last lines vLLM printed")
    warnings = StringListField(read_only=True)

    class Meta:
        model = Deployment
        fields = ["state", "since", "reported_at", "running_revision", "pid", "restarts",
                  "exit_code", "error", "next_start_at", "argv", "log_tail", "warnings"]
        read_only_fields = fields


class DeploymentSerializer(CheckedDraft, serializers.ModelSerializer):
    draft_model = Deployment
    draft_check = staticmethod(deployments.check)
    host = serializers.PrimaryKeyRelatedField(queryset=Host.objects.all(),
                                              help_text="Host id; fixed once created")
    hostname = serializers.CharField(source="host.hostname", read_only=True)
    gpu_indices = IntListField(help_text="GPU indices on the host, e.g. [0, 1]")
    args = ObjectField(required=False, help_text=(
        'vLLM arguments by name, e.g. {"max_num_seqs": 256, "gpu_memory_utilization": 0.9}; '
        "checked against the arguments vllm_version accepts"))
    cpus = NullableIntListField(required=False, help_text="CPU ids to bind to; null: unbound")
    env = ObjectField(required=False, help_text=(
        f"Extra environment variables. Values are write-only: every reader gets "
        f"{deployments.REDACTED!r} for each, and a write that sends {deployments.REDACTED!r} "
        f"for a variable keeps the value it holds. Loader variables (LD_PRELOAD, PYTHONPATH "
        f"...) are refused unless the control plane allows them; variables that decide where "
        f"credentials are sent (HF_ENDPOINT, HTTPS_PROXY, REQUESTS_CA_BUNDLE ...) need "
        f"fleet.deploy_code to set or change"))
    vllm_version = serializers.CharField(
        max_length=32, required=False, default=vllm_args.DEFAULT_VERSION,
        help_text=f"The vLLM release on the host; known: {', '.join(vllm_args.KNOWN_VERSIONS)}")
    reason = serializers.CharField(write_only=True, required=False, allow_blank=True,
                                   help_text="Why: kept with the revision")
    status = DeploymentStatusSerializer(source="*", read_only=True)
    code_loading_args = serializers.SerializerMethodField(help_text=(
        "The arguments that make vLLM import or run code the config chooses "
        "(trust_remote_code ...); changing them needs the permission fleet.deploy_code"))
    code_loading_env = serializers.SerializerMethodField(help_text=(
        "The loader variables in env (LD_PRELOAD ...); they need fleet.deploy_code"))

    class Meta:
        model = Deployment
        fields = ["id", "host", "hostname", "name", "enabled", "model", "port", "gpu_indices",
                  "vllm_version", "args", "cpus", "numa_node", "env", "drain_timeout_s",
                  "code_loading_args", "code_loading_env",
                  "revision", "created_at", "updated_at", "status", "reason"]
        read_only_fields = ["id", "revision", "created_at", "updated_at"]

    def validate_host(self, host: Host) -> Host:
        if self.instance is not None and host.pk != self.instance.host_id:
            raise serializers.ValidationError("a deployment cannot move to another host")
        return host

    def _save(self, deployment: Deployment, data: dict) -> Deployment:
        reason = data.pop("reason", "")
        for name, value in data.items():
            setattr(deployment, name, value)
        user = self.context["request"].user
        try:
            deployments.save(deployment, author=user, reason=reason)
        except deployments.CodeNotPermitted as exc:
            raise PermissionDenied(exc.message_dict) from None
        except DjangoValidationError as exc:
            raise drf_errors(exc) from None
        return deployment


class DeploymentRevisionSerializer(serializers.ModelSerializer):
    author = serializers.CharField(source="author.username", read_only=True, default=None)
    config = ObjectField(read_only=True, help_text=(
        "The desired config of this revision, env values redacted"))
    changed = StringListField(read_only=True, help_text=(
        'Fields changed from the one before; a changed env also lists "env.NAME" for each '
        "variable added, removed or given another value"))

    class Meta:
        model = DeploymentRevision
        fields = ["revision", "config", "changed", "author", "reason", "created_at"]
        read_only_fields = fields

    def to_representation(self, instance):
        data = super().to_representation(instance)
        # Revisions are stored redacted; older ones were not.
        data["config"] = deployments.redacted_config(data.get("config"))
        return data


class RevertSerializer(serializers.Serializer):
    revision = serializers.IntegerField(min_value=1)
    reason = serializers.CharField(required=False, allow_blank=True)


class AgentSpecSerializer(serializers.Serializer):
    """One deployment as the agent runs it."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    revision = serializers.IntegerField()
    model = serializers.CharField()
    port = serializers.IntegerField()
    gpu_indices = IntListField()
    vllm_version = serializers.CharField()
    args = ObjectField()
    argv = StringListField(help_text="args rendered as vLLM flags")
    cpus = NullableIntListField()
    numa_node = serializers.IntegerField(allow_null=True)
    env = ObjectField()
    drain_timeout_s = serializers.IntegerField()


class RouterSpecSerializer(serializers.Serializer):
    """One router the agent runs (with --router): a service's vllm-router and its workers."""

    service_id = serializers.IntegerField()
    service = serializers.CharField(help_text="The service's name")
    port = serializers.IntegerField(help_text="The port clients reach the router at")
    policy = serializers.CharField(help_text="vllm-router's --policy")
    workers = StringListField(help_text="The replicas in rotation, as http://address:port: "
                                        "exactly the router's worker list")
    model = serializers.CharField()
    hold_s = serializers.IntegerField(required=False, help_text=(
        "How long the router holds a request while it has no worker, in seconds (a service "
        "with min_replicas 0: its retry budget covers the first replica's start); absent: "
        "the router's usual retries. A change restarts the router"))


class AgentConfigSerializer(serializers.Serializer):
    version = serializers.IntegerField(help_text="The host's config_version")
    deployments = AgentSpecSerializer(many=True)
    routers = RouterSpecSerializer(many=True, help_text="The services this host routes "
                                   "(empty unless its agent runs with --router)")


class UnixTimeField(serializers.FloatField):
    """Unix seconds between 1970 and 2100, finite."""

    def __init__(self, **kwargs):
        super().__init__(min_value=0.0, max_value=MAX_UNIX_S, **kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            self.fail("invalid")
        return value


class AgentReportSerializer(serializers.Serializer):
    id = serializers.IntegerField(min_value=1, max_value=MAX_BIGINT)
    revision = serializers.IntegerField(min_value=1, max_value=MAX_INT32, allow_null=True,
                                        required=False)
    state = serializers.ChoiceField(choices=deployments.STATES)
    since = UnixTimeField(required=False, allow_null=True, help_text="Unix seconds")
    pid = serializers.IntegerField(min_value=1, max_value=MAX_INT32, required=False,
                                   allow_null=True)
    restarts = serializers.IntegerField(min_value=0, max_value=MAX_INT32, required=False,
                                        default=0)
    exit_code = serializers.IntegerField(min_value=-MAX_INT32 - 1, max_value=MAX_INT32,
                                         required=False, allow_null=True)
    error = serializers.CharField(required=False, allow_blank=True, allow_null=True,
                                  max_length=1000, help_text="Why it is not ready")
    next_start_at = UnixTimeField(required=False, allow_null=True)
    argv = serializers.ListField(child=serializers.CharField(allow_blank=True, max_length=4096),
                                 required=False, max_length=512)
    log_tail = serializers.ListField(child=serializers.CharField(allow_blank=True,
                                                                 max_length=4096,
                                                                 trim_whitespace=False),
                                     required=False, max_length=500)
    warnings = serializers.ListField(child=serializers.CharField(max_length=1000),
                                     required=False, max_length=50)
    phases = serializers.DictField(
        child=UnixTimeField(), required=False,
        help_text="When each phase of the running process's start ended, unix seconds: "
                  f"{', '.join(deployments.START_PHASES)} (each optional)")

    def validate_phases(self, phases: dict) -> dict:
        # The known names only, so the dict is bounded by them (at most 8 ever).
        unknown = sorted(set(phases) - set(deployments.START_PHASES))
        if unknown:
            raise serializers.ValidationError(
                f"unknown phase {unknown[0][:40]!r}; phases are "
                f"{', '.join(deployments.START_PHASES)}")
        return phases


# Bounds of a router report: as many workers as a service may have replicas, and some.
MAX_ROUTERS = 64
MAX_WORKERS = 256
MAX_URL = 300
ROUTER_STATE = r"^[a-z_]{1,24}\Z"


class WorkerCountsSerializer(serializers.Serializer):
    processed = serializers.IntegerField(min_value=0, max_value=MAX_BIGINT, required=False)
    running = serializers.IntegerField(min_value=0, max_value=MAX_INT32, required=False)
    healthy = serializers.IntegerField(min_value=0, max_value=1, required=False)


class RouterMetricsSerializer(serializers.Serializer):
    requests_total = serializers.IntegerField(min_value=0, max_value=MAX_BIGINT,
                                              required=False)
    no_worker_tries = serializers.IntegerField(
        min_value=0, max_value=MAX_BIGINT, required=False,
        help_text="The router's tries that found no worker (a request held at zero replicas)")
    per_worker = serializers.DictField(child=WorkerCountsSerializer(), required=False,
                                       help_text="worker URL -> its counts")

    def validate_per_worker(self, value: dict) -> dict:
        if len(value) > MAX_WORKERS:
            raise serializers.ValidationError(f"at most {MAX_WORKERS} workers")
        if any(len(url) > MAX_URL for url in value):
            raise serializers.ValidationError(f"a worker URL has at most {MAX_URL} characters")
        return value


class RouterReportSerializer(serializers.Serializer):
    """What the agent reports of one router it runs (docs/services.md)."""

    service_id = serializers.IntegerField(min_value=1, max_value=MAX_BIGINT)
    state = serializers.RegexField(ROUTER_STATE, help_text="ready, starting, crashed ...",
                                   error_messages={"invalid": "lower-case letters and _ "
                                                   "(ready, starting, crashed ...), at most 24"})
    pid = serializers.IntegerField(min_value=1, max_value=MAX_INT32, required=False,
                                   allow_null=True)
    port = serializers.IntegerField(min_value=1, max_value=65535, required=False,
                                    allow_null=True)
    workers = serializers.ListField(child=serializers.CharField(max_length=MAX_URL),
                                    required=False, max_length=MAX_WORKERS,
                                    help_text="The router's worker list as it answers /workers")
    healthy = serializers.BooleanField(required=False, allow_null=True)
    error = serializers.CharField(required=False, allow_blank=True, allow_null=True,
                                  max_length=1000)
    log_tail = serializers.ListField(child=serializers.CharField(allow_blank=True,
                                                                 max_length=4096,
                                                                 trim_whitespace=False),
                                     required=False, max_length=200)
    metrics = RouterMetricsSerializer(required=False)
    at = UnixTimeField(required=False, allow_null=True, help_text="Unix seconds")


class AgentStatusSerializer(serializers.Serializer):
    deployments = AgentReportSerializer(many=True, max_length=100)
    routers = RouterReportSerializer(many=True, max_length=MAX_ROUTERS, required=False,
                                     help_text="The routers the agent runs (with --router)")
