"""Rule validation (errors name the field) and the summary template."""

from __future__ import annotations

import string
from collections.abc import Mapping

from django.core.exceptions import ValidationError

from agents.protocol import Metric
from controlplane.alerts.models import Aggregation, AlertRule, RuleKind
from controlplane.alerts.patterns import glob_problem
from controlplane.alerts.silences import validate_matchers
from controlplane.telemetry.series import find_metric
from controlplane.telemetry.series.errors import SeriesError

# Names a summary may use: "{host} GPU {gpu_index}: {value:.0f} °C for {for_s}s".
TEMPLATE_FIELDS = frozenset({
    "rule", "severity", "value", "threshold", "op", "metric", "window_s", "for_s", "target",
    "host", "host_id", "engine", "engine_id", "gpu", "gpu_id", "gpu_index",
})
# Named kinds and the entity their targets are.
NAMED_ENTITY = {
    RuleKind.HOST_NO_DATA: "host",
    RuleKind.ENGINE_DOWN: "engine",
    RuleKind.KV_PRESSURE: "engine",
    RuleKind.MEMORY_BEYOND_SHARE: "gpu",
    RuleKind.CPU_BOUND_ENGINE: "engine",
}
# The labels a rule's label_matchers scope by: the target's host name, engine name, GPU uuid and
# the engine's model (a GPU or host target has no engine: those read "").
SCOPE_LABELS = ("host", "engine", "gpu", "model")
MAX_WINDOW_S = 3600  # evaluation reads raw rows: windows stay short


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


def template_problem(template: str) -> str | None:
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        return f"summary is not a valid template: {exc}"
    unknown = sorted({n.split(".")[0].split("[")[0] for n in names} - TEMPLATE_FIELDS)
    if "" in unknown:
        return "summary uses an empty {} field; name it, e.g. {value}"
    if unknown:
        return (f"summary uses unknown field(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(TEMPLATE_FIELDS))}")
    return None


def render_summary(rule: AlertRule, fields: Mapping[str, object]) -> str:
    values = dict.fromkeys(TEMPLATE_FIELDS, "")
    values.update(rule=rule.name, severity=rule.severity, threshold=rule.threshold, op=rule.op,
                  metric=rule.metric, window_s=rule.window_s, for_s=rule.for_s)
    values.update(fields)
    if values.get("value") in ("", None):
        values["value"] = float("nan")
    try:
        return rule.summary.format(**values) if rule.summary else _default(values)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        # A format spec that does not suit the value (":.1f" of a missing value): say so plainly
        # rather than lose the alert.
        return f"{_default(values)} (summary template failed)"


def _default(values: Mapping[str, object]) -> str:
    return f"{values['rule']} on {values['target']}: {values['value']}"
