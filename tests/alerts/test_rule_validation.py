"""Rules are refused with errors that name the field at fault."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from controlplane.alerts.models import AlertRule


def errors_of(**fields) -> dict[str, list[str]]:
    fields.setdefault("name", "r")
    with pytest.raises(ValidationError) as caught:
        AlertRule(**fields).full_clean()
    return caught.value.message_dict


def test_an_unknown_metric_is_refused_with_close_names(db):
    errors = errors_of(metric="gpu.temp")
    assert "unknown metric 'gpu.temp'" in errors["metric"][0]
    assert "gpu.temp_c" in errors["metric"][0]


def test_a_quantile_on_a_gauge_is_refused(db):
    errors = errors_of(metric="gpu.temp_c", aggregation="quantile", quantile=0.99)
    assert errors["aggregation"] == [
        "quantile applies to histogram metrics only; gpu.temp_c is a gauge"]


def test_a_histogram_takes_only_a_quantile(db):
    errors = errors_of(metric="engine.ttft_seconds", aggregation="avg")
    assert "histogram" in errors["aggregation"][0]


def test_a_quantile_outside_zero_to_one_is_refused(db):
    errors = errors_of(metric="engine.ttft_seconds", aggregation="quantile", quantile=99)
    assert "between 0 and 1" in errors["quantile"][0]


def test_an_unknown_comparison_is_refused(db):
    assert "op" in errors_of(metric="gpu.temp_c", op="=>")


def test_a_bitmask_on_a_float_metric_is_refused(db):
    assert "bitmask" in errors_of(metric="gpu.temp_c", bitmask=4)


def test_an_array_metric_is_refused(db):
    assert "array" in errors_of(metric="host.cpu_core_pct")["metric"][0]


def test_a_summary_naming_an_unknown_field_is_refused(db):
    errors = errors_of(metric="gpu.temp_c", summary="{hostname} is hot")
    assert "unknown field(s) hostname" in errors["summary"][0]


def test_a_window_longer_than_an_hour_is_refused(db):
    assert "window_s" in errors_of(metric="gpu.temp_c", window_s=7200)


def test_scope_ids_must_be_integers(db):
    assert "host_ids" in errors_of(metric="gpu.temp_c", host_ids=["gpu-node-1"])


@pytest.mark.parametrize(("matchers", "says"), [
    ("model=llama", "label_matchers must be a list"),
    ([{"label": "alertname", "value": "x"}], "label_matchers[0].label 'alertname' is not one of "
                                             "host, engine, gpu, model"),
    ([{"label": "model", "op": "~=", "value": "x"}], "label_matchers[0].op must be one of"),
    ([{"label": "model", "op": "=~", "value": "llama("}], "label_matchers[0].value is not a regex"),
    ([{"label": "model"}], "label_matchers[0] must be {label, op, value}"),
])
def test_label_matchers_are_checked_like_a_silences(db, matchers, says):
    errors = errors_of(metric="gpu.temp_c", label_matchers=matchers)
    assert errors["label_matchers"][0].startswith(says), errors


def test_a_valid_rule_passes(db):
    AlertRule(name="ok", metric="engine.ttft_seconds", aggregation="quantile", quantile=0.99,
              summary="{engine}: {value:.2f} s").full_clean()
