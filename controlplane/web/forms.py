"""Forms of the alert and deployment pages. Rules validate through the model (``full_clean`` ->
``rules.validate_rule``) and deployments through their service (``deployments.check``), so a
form error and an API error say the same thing."""

from __future__ import annotations

import json
import re
import shlex
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Model
from django.utils import timezone

from agents import vllm_args
from agents.protocol import METRICS
from controlplane.alerts.models import AlertRule, Op
from controlplane.alerts.silences import validate_matchers
from controlplane.fleet import deployments, host_labels, placement, services
from controlplane.fleet.models import Deployment, Host, Service
from controlplane.fleet.scaling_policy import KNOB_RANGES

# "label=value", "label!=value", "label=~regex", "label!~regex": longest operators first.
MATCHER_LINE = re.compile(r"^\s*(\w+)\s*(!=|=~|!~|=)\s*(.*?)\s*$")
DURATIONS = [("1800", "30 minutes"), ("3600", "1 hour"), ("7200", "2 hours"),
             ("14400", "4 hours"), ("28800", "8 hours"), ("86400", "1 day"),
             ("259200", "3 days"), ("604800", "7 days")]


def metric_choices() -> list:
    """The catalog's single-valued metrics, grouped by entity (arrays cannot be rules)."""
    groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for metric in sorted(METRICS.values(), key=lambda m: m.name):
        if not metric.array:
            unit = f" ({metric.unit})" if metric.unit else ""
            groups[metric.entity].append((metric.name, f"{metric.name}{unit} · {metric.kind}"))
    return [("", "– none (named kinds) –"), *sorted(groups.items())]


class IdListField(forms.CharField):
    """Comma-separated integer ids, kept as a list; blank is every id."""

    def prepare_value(self, value):
        return ", ".join(map(str, value)) if isinstance(value, list) else value

    def to_python(self, value) -> list[int]:
        text = (value or "").strip()
        if not text:
            return []
        try:
            return [int(part) for part in re.split(r"[,\s]+", text) if part]
        except ValueError:
            raise ValidationError("integer ids, separated by commas") from None


class MatcherLinesField(forms.CharField):
    """Matchers written one per line (label=value, label!=value, label=~regex, label!~regex),
    kept as [{label, op, value}]; the model checks the labels."""

    def to_python(self, value) -> list[dict[str, str]]:
        return parse_matchers(super().to_python(value) or "")

    def prepare_value(self, value) -> str:
        return matcher_lines(value) if isinstance(value, list) else value


class AlertRuleForm(forms.ModelForm):
    metric = forms.ChoiceField(choices=metric_choices, required=False)
    host_ids = IdListField(required=False, help_text="host ids, comma-separated; blank: all")
    engine_ids = IdListField(required=False, help_text="engine ids, comma-separated; blank: all")
    op = forms.ChoiceField(choices=[(op, op) for op in Op.values])
    label_matchers = MatcherLinesField(
        required=False, label="Label matchers",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "model=~llama-3.*"}),
        help_text="one per line: host, engine, gpu or model with =, !=, =~ or !~; "
                  "blank: no label filter")

    class Meta:
        model = AlertRule
        fields = ["name", "enabled", "kind", "severity", "metric", "aggregation", "quantile",
                  "bitmask", "window_s", "op", "threshold", "for_s", "keep_firing_for_s",
                  "hostname_glob", "host_ids", "engine_ids", "label_matchers", "params",
                  "summary",
                  "description"]
        labels = {"window_s": "Window (s)", "for_s": "For (s)",
                  "keep_firing_for_s": "Keep firing for (s)"}
        help_texts = {
            "metric": "threshold rules: a single-valued catalog metric",
            "quantile": "histogram metrics only: 0.99 for p99",
            "bitmask": "integer metrics: a sample counts 1 when value & mask != 0",
            "window_s": "seconds of samples the aggregation reads (at most 3600)",
            "for_s": "the condition must hold this long before the alert fires",
            "keep_firing_for_s": "stays firing this long after the condition clears",
            "hostname_glob": "e.g. infer-*; blank: every host",
            "params": 'named kinds: a second threshold ({"waiting_above": 0}), an objective '
                      '({"objective": "ttft", "short_window_s": 300}): docs/alerts.md',
        }
        widgets = {"params": forms.Textarea(attrs={"rows": 2}),
                   "description": forms.Textarea(attrs={"rows": 3}),
                   "summary": forms.TextInput(attrs={"size": 80})}

    def save(self, commit: bool = True) -> AlertRule:
        self.instance.updated_at = timezone.now()
        return super().save(commit)


def parse_matchers(text: str) -> list[dict[str, str]]:
    matchers = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = MATCHER_LINE.match(line)
        if not match:
            raise ValidationError(f"line {number}: write label=value, label!=value, "
                                  f"label=~regex or label!~regex")
        label, op, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        matchers.append({"label": label, "op": op, "value": value})
    return matchers


def matcher_lines(matchers: list[dict[str, str]]) -> str:
    return "\n".join(f"{m['label']}{m.get('op', '=')}{m['value']}" for m in matchers)


class SilenceForm(forms.Form):
    matchers = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "alertname=GPU too hot\n"
                                                                "host=~gpu-node-.*"}),
        help_text="one per line: label=value, label!=value, label=~regex, label!~regex; "
                  "labels: alertname, severity, host, engine, gpu")
    starts_at = forms.DateTimeField(required=False, help_text="UTC; blank: now",
                                    widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    duration_s = forms.TypedChoiceField(choices=DURATIONS, coerce=int, initial="7200",
                                        label="For")
    author = forms.CharField(max_length=150)
    comment = forms.CharField(max_length=1000, widget=forms.TextInput(attrs={"size": 60}))

    def clean_matchers(self) -> list[dict[str, str]]:
        matchers = parse_matchers(self.cleaned_data["matchers"])
        try:
            return validate_matchers(matchers)
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["matchers"]) from None

    def clean(self) -> dict:
        data = super().clean()
        if "duration_s" in data:
            data["starts_at"] = data.get("starts_at") or timezone.now()
            data["ends_at"] = data["starts_at"] + timedelta(seconds=data["duration_s"])
        return data


class AckForm(forms.Form):
    comment = forms.CharField(max_length=400, required=False,
                              widget=forms.TextInput(attrs={"size": 50,
                                                            "placeholder": "why (optional)"}))


# --- Deployments ---------------------------------------------------------------------------
# The form only reads what an operator types (lists, lines, flags) into the values the API
# takes as JSON; every rule about those values lives in controlplane.fleet.deployments (check,
# the deploy_code permission), so a page and the API refuse the same things with the same words.

MAX_CPU_IDS = 4096  # a range like "0-99999999" must not build a list that large
MAX_ARGS_TEXT = 65536  # characters of arguments read (JSON or flags): far above any real config
# Every variable the service allows, at its longest, as NAME=value lines.
MAX_ENV_TEXT = deployments.MAX_ENV_VARS * (deployments.MAX_ENV_NAME + deployments.MAX_ENV_VALUE + 2)


class GpuIndicesField(forms.CharField):
    """GPU indices, comma-separated ("0, 1"); blank is none (vLLM's CPU build)."""

    def prepare_value(self, value):
        return ", ".join(map(str, value)) if isinstance(value, list) else value

    def to_python(self, value) -> list[int]:
        text = (value or "").strip()
        try:
            return [int(part) for part in re.split(r"[,\s]+", text) if part]
        except ValueError:
            raise ValidationError("GPU indices separated by commas, e.g. 0, 1") from None


class CpuListField(forms.CharField):
    """CPU ids as a list with ranges ("0-3, 8"), as taskset takes them; blank is unbound."""

    def prepare_value(self, value):
        return ", ".join(map(str, value)) if isinstance(value, list) else value

    def to_python(self, value) -> list[int] | None:
        text = (value or "").strip()
        if not text:
            return None
        cpus: list[int] = []
        for part in filter(None, re.split(r"[,\s]+", text)):
            match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
            if not match:
                raise ValidationError(f"{part!r}: CPU ids or ranges, e.g. 0-3, 8")
            first, last = int(match[1]), int(match[2] or match[1])
            if last < first or len(cpus) + last - first + 1 > MAX_CPU_IDS:
                raise ValidationError(f"{part!r}: a range low-high, {MAX_CPU_IDS} CPUs at most")
            cpus.extend(range(first, last + 1))
        return cpus


class EnvLinesField(forms.CharField):
    """Environment variables, one NAME=value a line. Values are write-only: the form shows
    each as REDACTED, and a line sent back with it keeps the value the deployment holds."""

    widget = forms.Textarea(attrs={"rows": 3, "placeholder": "VLLM_LOGGING_LEVEL=INFO"})

    def prepare_value(self, value):
        if isinstance(value, dict):
            return "\n".join(f"{name}={deployments.REDACTED}" for name in value)
        return value

    def to_python(self, value) -> dict[str, str]:
        if self.max_length is not None and len(value or "") > self.max_length:
            raise ValidationError(f"at most {self.max_length} characters")
        env: dict[str, str] = {}
        for number, line in enumerate((value or "").splitlines(), start=1):
            if not line.strip():
                continue
            name, eq, text = line.partition("=")
            name = name.strip()
            if not eq or not name:
                raise ValidationError(f"line {number}: write NAME=value")
            if name in env:
                raise ValidationError(f"line {number}: {name} is set twice")
            env[name] = text
        return env


class VllmArgsField(forms.CharField):
    """vLLM arguments as a JSON object ({"max_num_seqs": 256}) or as flags
    (--max-num-seqs 256 --enable-prefix-caching); flags are read for the form's vLLM version
    by the agent's own reader (agents.vllm_args.from_argv), in `DeploymentForm.clean_args`."""

    widget = forms.Textarea(attrs={"rows": 6, "spellcheck": "false"})

    def prepare_value(self, value):
        if isinstance(value, dict):
            return json.dumps(value, indent=2)
        return value


def args_from_text(text: str, version: str) -> object:
    """The arguments typed in the form: JSON (any value: the rules say what is wrong with
    it) or flags. ValidationError for what cannot be read at all."""
    text = text.strip()
    if not text:
        return {}
    if not text.startswith("-"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValidationError(f"not JSON ({exc}): write a JSON object such as "
                                  '{"max_num_seqs": 256}, or flags such as '
                                  "--max-num-seqs 256") from None
    try:
        tokens = shlex.split(text)
        read = vllm_args.from_argv(tokens, version)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    if leftover := read.pop(vllm_args.UNRECOGNIZED, []):
        # A value right after a flag that was not read is that flag's: one message for both.
        named = [token for i, token in enumerate(leftover)
                 if token.startswith("-") or i == 0 or not leftover[i - 1].startswith("-")]
        raise ValidationError([_leftover_problem(token, version) for token in named])
    return read


def _leftover_problem(token: str, version: str) -> str:
    """Why a token of the flags was not read: the catalog's own message for a flag it does
    not know (with the name meant), else what the token needs."""
    if not token.startswith("-"):
        return f"{token!r} follows no flag that takes it"
    name = token.lstrip("-").partition("=")[0].replace("-", "_")
    spec = vllm_args.available(version).get(name)
    if spec is None:
        errors = vllm_args.validate({name: True}, version)
        return errors[0].message if errors else f"{token!r} is not a flag of vLLM {version}"
    return f"{spec.flag}: needs a value of type {spec.kind}"


class DesiredConfigForm:
    """What a deployment's and a service's forms share (a mixin before ModelForm): the vLLM
    arguments read as JSON or flags for the chosen version, env values sent back redacted
    keeping the values held, and the draft checked whole by the domain's ``domain_check`` (a
    staticmethod), each message under its field."""

    domain_check: Callable[[Model], None]

    def hold_config(self) -> None:
        """Call at the end of __init__: the env values held, the default version."""
        self.held_env = dict(self.instance.env or {}) if self.instance.pk else {}
        if not self.instance.vllm_version:  # a new one: the API's default too
            self.initial["vllm_version"] = vllm_args.DEFAULT_VERSION

    def clean_args(self) -> object:
        version = self.cleaned_data.get("vllm_version") or vllm_args.DEFAULT_VERSION
        return args_from_text(self.cleaned_data.get("args") or "", version)

    def clean_env(self) -> object:
        return deployments.resolve_env(self.cleaned_data.get("env"), self.held_env)

    def _post_clean(self) -> None:
        super()._post_clean()  # the draft is self.instance now; model fields, uniqueness
        if self.errors:
            return
        try:
            type(self).domain_check(self.instance)
        except ValidationError as exc:
            add_errors(self, exc)


class DeploymentForm(DesiredConfigForm, forms.ModelForm):
    """Create or change a deployment. Shapes are read here; `_post_clean` then runs the
    service's checks (``deployments.check``) on the draft, keyed by the same field names as
    the API's 400; the view saves through ``deployments.save`` (the deploy_code rule)."""

    domain_check = staticmethod(deployments.check)

    vllm_version = forms.CharField(
        max_length=32, initial=vllm_args.DEFAULT_VERSION, label="vLLM version",
        widget=forms.TextInput(attrs={"list": "vllm-versions"}),
        help_text=f"the vLLM release on the host; known: {', '.join(vllm_args.KNOWN_VERSIONS)}")
    gpu_indices = GpuIndicesField(
        required=False, label="GPU indices",
        help_text="GPUs on the host, comma-separated, e.g. 0, 1: exactly tensor x pipeline x "
                  "data parallel size of them; blank only on a host without GPUs")
    args = VllmArgsField(
        required=False, label="vLLM arguments", max_length=MAX_ARGS_TEXT,
        help_text='a JSON object, e.g. {"max_num_seqs": 256, "enable_prefix_caching": true}, '
                  "or flags, e.g. --max-num-seqs 256 --enable-prefix-caching; checked "
                  "against the vLLM version")
    cpus = CpuListField(required=False, label="CPUs",
                        help_text="CPU ids to bind to, e.g. 0-15 or 0, 2, 4; blank: unbound")
    env = EnvLinesField(
        required=False, label="Environment", max_length=MAX_ENV_TEXT,
        help_text=f"one NAME=value a line; values are write-only: {deployments.REDACTED} "
                  "keeps the value held")
    reason = forms.CharField(required=False, max_length=1000, label="Reason",
                             widget=forms.TextInput(attrs={"size": 60}),
                             help_text="why: kept with the revision")

    class Meta:
        model = Deployment
        fields = ["host", "name", "enabled", "model", "port", "gpu_indices", "vllm_version",
                  "args", "cpus", "numa_node", "env", "drain_timeout_s"]
        labels = {"numa_node": "NUMA node", "drain_timeout_s": "Drain timeout (s)"}
        help_texts = {
            "host": "fixed once created",
            "name": "letters, digits, - and _; unique on the host",
            "model": "what vllm serve loads, e.g. meta-llama/Llama-3.1-8B-Instruct",
            "port": "the API server's port, unique on the host (1024-65535)",
            "numa_node": "bind to this node's CPUs and memory when CPUs is blank",
            "drain_timeout_s": "how long a restart lets running requests finish",
            "enabled": "unticked: the agent drains and stops it, the config is kept",
        }
        widgets = {"model": forms.TextInput(attrs={"size": 60})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["host"].queryset = Host.objects.order_by("hostname")
        # A deployment cannot move: the field stays (uniqueness is checked per host) but the
        # posted value is ignored.
        self.fields["host"].disabled = self.instance.pk is not None
        self.hold_config()


# --- Services and host labels --------------------------------------------------------------
# As for deployments: the form reads what is typed (flags, NAME=value and key=value lines)
# into the values the API takes; ``services.check`` and ``host_labels.check`` say what is wrong
# with them, in the API's words.

# key=value lines: every label a host may hold, at their longest.
MAX_LABEL_TEXT = host_labels.MAX_LABELS * (host_labels.MAX_KEY + host_labels.MAX_VALUE + 2)


class LabelLinesField(forms.CharField):
    """Labels, one key=value a line, kept as a dict; blank is none."""

    widget = forms.Textarea(attrs={"rows": 3, "placeholder": "pool=online\nzone=rack-3"})

    def prepare_value(self, value):
        return host_labels.lines(value) if isinstance(value, dict) else value

    def to_python(self, value) -> dict[str, str]:
        if self.max_length is not None and len(value or "") > self.max_length:
            raise ValidationError(f"at most {self.max_length} characters")
        return host_labels.parse_lines(value or "")


class HostLabelsForm(forms.Form):
    labels = LabelLinesField(
        required=False, label="Labels", max_length=MAX_LABEL_TEXT,
        help_text=f"one key=value a line, at most {host_labels.MAX_LABELS}; they override the "
                  "agent's labels of the same key; services' selectors match them")

    def clean_labels(self) -> dict[str, str]:
        try:
            return host_labels.check(self.cleaned_data["labels"])
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["labels"]) from None


def router_hosts(current: Host | None) -> list[int]:
    """Ids of the hosts whose agents run with --router (and the service's own router host,
    which may have lost the role: the form must still show what the service holds)."""
    ids = [h.pk for h in Host.objects.only("id", "inventory").order_by("hostname")
           if "router" in placement.roles(h.inventory)]
    return ids + ([current.pk] if current is not None and current.pk not in ids else [])


SCALING_KEPT = ("scaling_mode", "min_replicas", "max_replicas")


class ServiceForm(DesiredConfigForm, forms.ModelForm):
    """Create or change a service. Shapes are read here; `_post_clean` runs the service's
    checks (``services.check``) on the draft, keyed as the API's 400; the view saves through
    ``services.save`` (placement, rollouts, the deploy_code rule)."""

    domain_check = staticmethod(services.check)

    vllm_version = forms.CharField(
        max_length=32, initial=vllm_args.DEFAULT_VERSION, label="vLLM version",
        widget=forms.TextInput(attrs={"list": "vllm-versions"}),
        help_text=f"the vLLM release on the hosts; known: {', '.join(vllm_args.KNOWN_VERSIONS)}")
    args = VllmArgsField(
        required=False, label="vLLM arguments", max_length=MAX_ARGS_TEXT,
        help_text='a JSON object, e.g. {"max_num_seqs": 256}, or flags, e.g. --max-num-seqs '
                  "256; each replica takes tensor x pipeline x data parallel size GPUs")
    env = EnvLinesField(
        required=False, label="Environment", max_length=MAX_ENV_TEXT,
        help_text=f"one NAME=value a line, for every replica; values are write-only: "
                  f"{deployments.REDACTED} keeps the value held")
    selector = LabelLinesField(
        required=False, label="Host selector", max_length=MAX_LABEL_TEXT,
        help_text="host labels a replica's host must carry, one key=value a line; blank: "
                  "any host")
    scaling = forms.JSONField(
        required=False, label="Scaling thresholds",
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="a JSON object over the defaults, e.g. {\"waiting_per_replica\": 8}; known: "
                  + ", ".join(sorted(KNOB_RANGES)))
    reason = forms.CharField(required=False, max_length=1000, label="Reason",
                             widget=forms.TextInput(attrs={"size": 60}),
                             help_text="why: kept with the revision")

    class Meta:
        model = Service
        fields = ["name", "model", "vllm_version", "replicas", "args", "env",
                  "drain_timeout_s", "selector", "gpu_model", "router_host", "router_port",
                  "router_policy", "strategy", "max_unavailable", "max_surge",
                  "canary_window_s", "scaling_mode", "min_replicas", "max_replicas",
                  "scaling"]
        labels = {"drain_timeout_s": "Drain timeout (s)", "gpu_model": "GPU model",
                  "scaling_mode": "Autoscaling", "min_replicas": "Min replicas",
                  "max_replicas": "Max replicas",
                  "canary_window_s": "Canary window (s)", "router_host": "Router host",
                  "max_unavailable": "Max unavailable", "max_surge": "Max surge"}
        help_texts = {
            "name": "a-z, 0-9 and -; its replicas are named <name>-<slot>; fixed once "
                    "created",
            "model": "what each replica's vllm serve loads, e.g. "
                     "meta-llama/Llama-3.1-8B-Instruct",
            "replicas": "how many replicas Pitwall places and keeps running",
            "gpu_model": "a part of the GPUs' name, e.g. H100; blank: any GPU",
            "router_host": "the host whose agent (run with --router) runs vllm-router for "
                           "the service; blank: no router",
            "router_port": "the router's port on that host",
            "router_policy": "how vllm-router picks a replica for each request",
            "strategy": "rolling: one replica after another; canary: one first, compared "
                        "over the canary window",
            "max_unavailable": "replicas a rollout may take out of the router at once",
            "max_surge": "extra replicas a rollout may start where spare GPUs allow",
            "drain_timeout_s": "how long a restart lets running requests finish",
            "scaling_mode": "off: the replica count above; recommend: decisions shown, not "
                            "taken; auto: taken, within min and max replicas",
            "min_replicas": "the autoscaler never goes below this",
            "max_replicas": "nor above this",
        }
        widgets = {"model": forms.TextInput(attrs={"size": 60}),
                   "replicas": forms.NumberInput(attrs={"min": 0,
                                                        "max": services.MAX_REPLICAS})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        held = self.instance.router_host if self.instance.router_host_id else None
        field = self.fields["router_host"]
        field.queryset = Host.objects.filter(pk__in=router_hosts(held)).order_by("hostname")
        field.empty_label = "– no router –"
        # Replicas are named after the service: a name, once given, stays.
        self.fields["name"].disabled = self.instance.pk is not None
        self.hold_config()
        # A form posted without the autoscaling fields (an older page, a script) keeps them.
        for name in SCALING_KEPT:
            self.fields[name].required = False

    def clean_scaling(self) -> object:
        value = self.cleaned_data.get("scaling")
        return {} if value in (None, "") else value

    def clean(self) -> dict:
        cleaned = super().clean()
        for name in SCALING_KEPT:
            if cleaned.get(name) in (None, ""):
                cleaned[name] = getattr(self.instance, name)
        return cleaned


def add_errors(form: forms.BaseForm, exc: ValidationError) -> None:
    """Each message under its field; one keyed by a name the form has no field for (a
    replica's, placement's) on top, with the name."""
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc)
        return
    for name, messages in exc.message_dict.items():
        if name in form.fields:
            form.add_error(name, messages)
        else:
            form.add_error(None, [f"{name}: {m}" if name != "__all__" else m
                                  for m in messages])
