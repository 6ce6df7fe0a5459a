"""Services: a model on many replicas behind vLLM's router, as the operator wants it, with its
replicas as placement made them and as their agents report them, its rollouts and events."""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied

from agents import vllm_args
from controlplane.api.serializers.alerts import drf_errors
from controlplane.api.serializers.deployments import IntListField
from controlplane.api.serializers.desired import CheckedDraft
from controlplane.api.serializers.fields import (
    NullableObjectField,
    ObjectField,
    StringListField,
)
from controlplane.api.serializers.hosts import LabelsField
from controlplane.fleet import deployments, replica_facts, services
from controlplane.fleet.models import (
    Deployment,
    DeploymentState,
    Host,
    Rollout,
    RolloutState,
    ScaleDecision,
    Service,
    ServiceEvent,
    ServiceRevision,
)
from controlplane.fleet.scaling_policy import KNOB_RANGES

_PHASES = {"type": "object", "properties": {name: {"type": "number"}
                                            for name in replica_facts.PHASES}}


@extend_schema_field(_PHASES)
class PhasesField(serializers.JSONField):
    pass


class ReplicaSerializer(serializers.ModelSerializer):
    """One replica: where placement put it, what its agent reports, whether the router sends
    it requests (and why not), how long its last start took and its share of the traffic."""

    slot = serializers.IntegerField(source="replica", read_only=True,
                                    help_text="Its slot in the service, 0..replicas-1")
    hostname = serializers.CharField(source="host.hostname", read_only=True)
    gpu_indices = IntListField(read_only=True)
    start_phases = PhasesField(read_only=True, help_text=(
        "Unix seconds of each phase of the running process's start, as its log showed them"))
    time_to_ready_s = serializers.SerializerMethodField(help_text=(
        "Seconds from process_start to api_ready of the last start; null until both are known"))
    # A plain string, as the rollouts' state: a second enum named "state" of these values
    # could not be named after one component.
    state = serializers.CharField(read_only=True, help_text=(
        "What its agent reports: " + ", ".join(DeploymentState.values)))
    traffic_share = serializers.SerializerMethodField(help_text=(
        "Percent of the requests the router processed that went to this replica; null when "
        "the router reported no count"))

    class Meta:
        model = Deployment
        fields = ["id", "slot", "name", "host", "hostname", "gpu_indices", "port", "state",
                  "revision", "running_revision", "in_rotation", "rotation_note",
                  "placement_reason", "time_to_ready_s", "start_phases", "traffic_share"]
        read_only_fields = fields

    def get_time_to_ready_s(self, d: Deployment) -> float | None:
        return replica_facts.time_to_ready(d.start_phases)

    def get_traffic_share(self, d: Deployment) -> float | None:
        return self.context.get("shares", {}).get(d.pk)


class RolloutSerializer(serializers.ModelSerializer):
    started_by = serializers.CharField(source="started_by.username", read_only=True,
                                       default=None)
    done = IntListField(read_only=True, help_text="Ids of the replicas changed so far")
    current = serializers.IntegerField(source="current_id", read_only=True, allow_null=True,
                                       help_text="The replica in hand")
    # A plain string: an enum named "state" would collide with the deployments' and alerts'
    state = serializers.CharField(read_only=True, help_text=(
        f"One of {', '.join(RolloutState.values)}"))

    class Meta:
        model = Rollout
        fields = ["id", "from_revision", "to_revision", "strategy", "state", "phase", "current",
                  "phase_since", "done", "detail", "started_by", "started_at", "ended_at"]
        read_only_fields = fields


class ServiceEventSerializer(serializers.ModelSerializer):
    deployment = serializers.IntegerField(source="deployment_id", read_only=True,
                                          allow_null=True)
    data = ObjectField(read_only=True, help_text="The figures behind the message")

    class Meta:
        model = ServiceEvent
        fields = ["id", "at", "kind", "deployment", "message", "data"]
        read_only_fields = fields


class ScaleDecisionSerializer(serializers.ModelSerializer):
    evidence = serializers.JSONField(read_only=True, help_text=(
        "Each figure over its window against its threshold: name, window_s, value, "
        "threshold, op, held"))
    placement = ObjectField(read_only=True, help_text=(
        "Where an added replica went and why (the placement decision)"))
    replica = serializers.IntegerField(source="deployment.replica", read_only=True,
                                       default=None, help_text="The slot added or removed")

    class Meta:
        model = ScaleDecision
        fields = ["id", "at", "mode", "direction", "replicas_before", "replicas_after",
                  "reason", "evidence", "state", "deployment", "replica", "placement",
                  "ready_s", "ended_at", "detail"]
        read_only_fields = fields


class ServiceRevisionSerializer(serializers.ModelSerializer):
    author = serializers.CharField(source="author.username", read_only=True, default=None)
    config = ObjectField(read_only=True, help_text=(
        "The desired config of this revision, env values redacted"))
    changed = StringListField(read_only=True, help_text="Fields changed from the one before")

    class Meta:
        model = ServiceRevision
        fields = ["revision", "config", "changed", "author", "reason", "created_at"]
        read_only_fields = fields

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["config"] = deployments.redacted_config(data.get("config"))
        return data


class ServiceSerializer(CheckedDraft, serializers.ModelSerializer):
    draft_model = Service
    draft_check = staticmethod(services.check)
    args = ObjectField(required=False, help_text=(
        'vLLM arguments by name, as a deployment\'s, e.g. {"max_num_seqs": 256}; the '
        "parallelism (tensor x pipeline x data parallel size) is the GPUs each replica takes"))
    env = ObjectField(required=False, help_text=(
        f"Extra environment variables of every replica. Values are write-only: readers get "
        f"{deployments.REDACTED!r}, and a write that sends it back keeps the value held. "
        f"The rules are a deployment's (loader and credential-routing variables)"))
    vllm_version = serializers.CharField(
        max_length=32, required=False, default=vllm_args.DEFAULT_VERSION,
        help_text=f"The vLLM release on the hosts; known: {', '.join(vllm_args.KNOWN_VERSIONS)}")
    selector = LabelsField(required=False, help_text=(
        'Host labels a replica\'s host must carry, e.g. {"pool": "online"}; {}: any host'))
    router_host = serializers.PrimaryKeyRelatedField(
        queryset=Host.objects.all(), required=False, allow_null=True,
        help_text="The host whose agent runs the router (it must report the router role)")
    router_hostname = serializers.CharField(source="router_host.hostname", read_only=True,
                                            default=None)
    reason = serializers.CharField(write_only=True, required=False, allow_blank=True,
                                   max_length=1000, help_text="Why: kept with the revision")
    code_loading_args = serializers.SerializerMethodField(help_text=(
        "Arguments that make vLLM import or run code the config chooses; changing them needs "
        "fleet.deploy_code"))
    code_loading_env = serializers.SerializerMethodField(help_text=(
        "Loader variables in env; they need fleet.deploy_code"))
    placement = ObjectField(read_only=True, help_text=(
        "The last placement decision: each slot with its reason, each host skipped and why"))
    replica_set = serializers.SerializerMethodField(help_text=(
        "The replicas, by slot (replicas is how many the service wants)"))
    rollout = serializers.SerializerMethodField(help_text="The running rollout, if any")
    router_status = NullableObjectField(read_only=True, help_text=(
        "The router agent's last report: state, workers, health, per-worker counts"))
    scaling = ObjectField(required=False, help_text=(
        "Autoscaling thresholds over the defaults, e.g. {\"waiting_per_replica\": 8, "
        "\"in_window_s\": 1200}; known: " + ", ".join(sorted(KNOB_RANGES))))

    class Meta:
        model = Service
        fields = ["id", "name", "model", "vllm_version", "args", "env", "drain_timeout_s",
                  "replicas", "selector", "gpu_model", "router_host", "router_hostname",
                  "router_port", "router_policy", "strategy", "max_unavailable", "max_surge",
                  "canary_window_s", "scaling_mode", "min_replicas", "max_replicas",
                  "scaling", "code_loading_args", "code_loading_env", "revision",
                  "created_at", "updated_at", "placement", "unplaced", "replica_set",
                  "rollout", "router_status", "router_reported_at", "reason"]
        read_only_fields = ["id", "revision", "created_at", "updated_at", "unplaced",
                            "router_reported_at"]
        extra_kwargs = {"name": {"help_text": "1 to 60 of a-z 0-9 -; its replicas are named "
                                              "<name>-<slot>; fixed once created"}}

    @extend_schema_field(ReplicaSerializer(many=True))
    def get_replica_set(self, s: Service) -> list[dict]:
        replicas = replicas_of(s)
        shares = replica_facts.traffic_shares(s, replicas)
        return ReplicaSerializer(replicas, many=True, context={"shares": shares}).data

    @extend_schema_field(RolloutSerializer(allow_null=True))
    def get_rollout(self, s: Service) -> dict | None:
        running = running_rollout(s)
        return RolloutSerializer(running).data if running is not None else None

    def validate_name(self, name: str) -> str:
        if self.instance is not None and name != self.instance.name:
            raise serializers.ValidationError(
                "a service cannot be renamed: its replicas are named after it")
        return name

    def _save(self, service: Service, data: dict) -> Service:
        reason = data.pop("reason", "")
        for name, value in data.items():
            setattr(service, name, value)
        with_code_check(lambda: services.save(service, self.context["request"].user, reason))
        forget_prefetched(service)  # the change placed, removed or rolled replicas
        return service


def forget_prefetched(service: Service) -> None:
    """Drop what the viewset's queryset read before a change, so the reply shows after it."""
    for name in ("prefetched_replicas", "running_rollouts"):
        service.__dict__.pop(name, None)


def with_code_check(change: Callable[[], object]) -> object:
    """Run a service change: a change that needs fleet.deploy_code is a 403 naming the field,
    any other refusal a 400 naming it (nothing is stored either way: the change is atomic)."""
    try:
        return change()
    except deployments.CodeNotPermitted as exc:
        raise PermissionDenied(exc.message_dict) from None
    except DjangoValidationError as exc:
        raise drf_errors(exc) from None


def replicas_of(service: Service) -> list[Deployment]:
    """The replicas by slot; prefetched by the viewset (``replicas``) or read here."""
    cached = getattr(service, "prefetched_replicas", None)
    if cached is not None:
        return cached
    return list(service.replica_set.select_related("host").order_by("replica", "id"))


def running_rollout(service: Service) -> Rollout | None:
    cached = getattr(service, "running_rollouts", None)
    if cached is not None:
        return cached[0] if cached else None
    return service.rollouts.filter(state=RolloutState.RUNNING).order_by("-started_at").first()
