"""Forms of the alert pages. Rules validate through the model (``full_clean`` ->
``rules.validate_rule``), so a form error and an API error say the same thing."""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import timedelta

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from agents.protocol import METRICS
from controlplane.alerts.models import AlertRule, Op
from controlplane.alerts.silences import validate_matchers

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
            "params": 'named kinds\' second threshold, e.g. {"waiting_above": 0}',
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
