"""Rule validation (errors name the field) and the summary template."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from functools import lru_cache

from django.core.exceptions import ValidationError

from agents.protocol import Metric
from controlplane.alerts.kind_params import params_problem
from controlplane.alerts.models import Aggregation, AlertRule, RuleKind
from controlplane.alerts.patterns import glob_problem
from controlplane.alerts.silences import validate_matchers
from controlplane.telemetry.series import find_metric
from controlplane.telemetry.series.errors import SeriesError

# Names a summary may use: "{host} GPU {gpu_index}: {value:.0f} °C for {for_s}s".
TEMPLATE_FIELDS = frozenset({
    "rule", "severity", "value", "threshold", "op", "metric", "window_s", "for_s", "target",
    "host", "host_id", "engine", "engine_id", "gpu", "gpu_id", "gpu_index", "service",
})
# The labels a rule's label_matchers scope by: the target's host name, engine name, GPU uuid and
# the engine's model (a GPU or host target has no engine: those read "").
SCOPE_LABELS = ("host", "engine", "gpu", "model")
MAX_WINDOW_S = 3600  # evaluation reads raw rows: windows stay short
# The largest number a summary's format spec may hold (a width or a precision): "{value:>200}".
# Unbounded, "{value:>20000000}" rendered 20 MB per target and ">3000000000" a MemoryError.
MAX_FORMAT_NUMBER = 200
_NUMBER = re.compile(r"\d+")
# The rendered summary is cut to the alert's column (the template fields themselves, a host name
# or a rule name, can make it longer than any template bound foresees).
SUMMARY_CHARS = 1000  # Alert.summary's max_length


def rule_metric(rule: AlertRule) -> Metric:
    return find_metric(rule.metric)


def validate_rule(rule: AlertRule) -> None:
    errors: dict[str, str] = {}
    if rule.kind not in RuleKind.values:
        errors["kind"] = f"unknown kind {rule.kind!r}; one of {', '.join(RuleKind.values)}"
    elif rule.kind == RuleKind.THRESHOLD:
        errors.update(_metric_errors(rule))
    if not 1 <= rule.window_s <= MAX_WINDOW_S:
        errors["window_s"] = f"window_s must be between 1 and {MAX_WINDOW_S} seconds"
    elif rule.kind in RuleKind.values and (problem := params_problem(rule)):
        errors["params"] = problem
    for field in ("host_ids", "engine_ids"):
        ids = getattr(rule, field)
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            errors[field] = f"{field} must be a list of integer ids"
    if rule.hostname_glob and (problem := glob_problem(rule.hostname_glob)):
        errors["hostname_glob"] = f"hostname_glob {problem}"
    try:
        validate_matchers(rule.label_matchers, field="label_matchers", labels=SCOPE_LABELS,
                          allow_empty=True)
    except ValidationError as exc:
        errors.update({k: v[0] for k, v in exc.message_dict.items()})
    problem = template_problem(rule.summary)
    if problem:
        errors["summary"] = problem
    if errors:
        raise ValidationError(errors)


def _metric_errors(rule: AlertRule) -> dict[str, str]:
    try:
        metric = rule_metric(rule)
    except SeriesError as exc:
        return {"metric": str(exc)}
    errors = {}
    if metric.array:
        errors["metric"] = f"{metric.name} is an array; rules take single-valued metrics"
    if rule.aggregation not in Aggregation.values:
        errors["aggregation"] = (f"unknown aggregation {rule.aggregation!r}; one of "
                                 f"{', '.join(Aggregation.values)}")
    elif (rule.aggregation == Aggregation.QUANTILE) != (metric.kind == "histogram"):
        errors["aggregation"] = (
            f"quantile applies to histogram metrics only; {metric.name} is a {metric.kind}"
            if rule.aggregation == Aggregation.QUANTILE else
            f"{metric.name} is a histogram: its only aggregation is quantile")
    if rule.aggregation == Aggregation.QUANTILE and not (
            rule.quantile is not None and 0 < rule.quantile < 1):
        errors["quantile"] = "quantile must be between 0 and 1 (0.99 for p99)"
    if rule.bitmask is not None and (not metric.integer or rule.bitmask <= 0):
        errors["bitmask"] = (f"bitmask needs a positive mask and an integer metric; "
                             f"{metric.name} is {'integer' if metric.integer else 'not'}")
    return errors


@lru_cache(maxsize=4096)  # every alert's summary asks, a cycle renders thousands
def template_problem(template: str) -> str | None:
    """Why a summary template is refused, or None: fields are plain names of TEMPLATE_FIELDS
    (no attribute or index access, no nested field in a format spec), and every number in a
    format spec is at most MAX_FORMAT_NUMBER."""
    try:
        parts = [(f, spec or "") for _, f, spec, _ in string.Formatter().parse(template)
                 if f is not None]
    except ValueError as exc:
        return f"summary is not a valid template: {exc}"
    names = [f for f, _ in parts]
    unknown = sorted(set(names) - TEMPLATE_FIELDS)
    if "" in unknown:
        return "summary uses an empty {} field; name it, e.g. {value}"
    access = sorted(n for n in unknown if "." in n or "[" in n)
    if access:
        return (f"summary may not reach into a field ({', '.join(access)}): use the plain "
                f"name, e.g. {{host}}")
    if unknown:
        return (f"summary uses unknown field(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(TEMPLATE_FIELDS))}")
    for name, spec in parts:
        if "{" in spec or "}" in spec:
            return f"summary formats {{{name}}} with a spec that holds another field: not allowed"
        if any(int(n) > MAX_FORMAT_NUMBER for n in _NUMBER.findall(spec)):
            return (f"summary formats {{{name}:{spec}}} too wide: widths and precisions go up "
                    f"to {MAX_FORMAT_NUMBER}")
    return None


def render_summary(rule: AlertRule, fields: Mapping[str, object]) -> str:
    """The alert's summary, at most SUMMARY_CHARS long. Never raises: a template that fails,
    or one stored before today's checks (template_problem), gives the default summary."""
    values = dict.fromkeys(TEMPLATE_FIELDS, "")
    values.update(rule=rule.name, severity=rule.severity, threshold=rule.threshold, op=rule.op,
                  metric=rule.metric, window_s=rule.window_s, for_s=rule.for_s)
    values.update(fields)
    if values.get("value") in ("", None):
        values["value"] = float("nan")
    if not rule.summary:
        return _cut(_default(values))
    if template_problem(rule.summary):
        # never formatted: its width could be gigabytes
        return _cut(f"{_default(values)} (summary template refused; edit the rule)")
    try:
        return _cut(rule.summary.format(**values))
    except Exception:  # noqa: BLE001 -- a summary never costs the alert
        # A format spec that does not suit the value (":.1f" of a missing value): say so plainly
        # rather than lose the alert.
        return _cut(f"{_default(values)} (summary template failed)")


def _cut(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 1] + "…"


def _default(values: Mapping[str, object]) -> str:
    return f"{values['rule']} on {values['target']}: {values['value']}"
