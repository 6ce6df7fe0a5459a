"""Summary templates: format specs with bounded widths and precision (checked when a rule is
saved), rendered text cut to the alert's column (for rules stored before the check)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from controlplane.alerts.models import Alert, AlertRule
from controlplane.alerts.rules import MAX_FORMAT_NUMBER, SUMMARY_CHARS, render_summary

FIELDS = {"value": 91.0, "host": "gpu-node-1", "target": "gpu:1"}


def summary_errors(summary: str) -> list[str]:
    rule = AlertRule(name="r", metric="gpu.temp_c", summary=summary)
    with pytest.raises(ValidationError) as caught:
        rule.full_clean()
    return caught.value.message_dict.get("summary", [])


@pytest.mark.parametrize("summary", [
    "{value:>20000000}",  # unbounded: a 20 MB preview reply
    "{value:>3000000000}",  # unbounded: MemoryError
    "{value:.100000f}",
    "{host:x<5000}",
    "{value:0{threshold}}",  # a nested field: a width chosen by another value
    "{host.__class__}",  # attribute access
    "{host[0]}",  # index access
])
def test_a_summary_with_a_huge_width_or_precision_or_field_access_is_refused(db, summary):
    [message] = summary_errors(summary)
    assert message.startswith("summary "), message


def test_the_bounds_themselves_are_accepted(db):
    rule = AlertRule(name="r", metric="gpu.temp_c",
                     summary=f"{{host:>{MAX_FORMAT_NUMBER}}} {{value:.{MAX_FORMAT_NUMBER}f}} "
                             "{value:.0f} {value:.0%} {value:,.2f} {host!r}")
    rule.full_clean()


def test_a_rendered_summary_is_cut_to_the_alerts_column():
    limit = Alert._meta.get_field("summary").max_length
    # 10 fields of 200 characters: 2,000 characters rendered, the column holds 1,000
    rule = AlertRule(name="r", summary=" ".join(["{host:>200}"] * 10))
    text = render_summary(rule, FIELDS)
    assert len(text) == limit and text.endswith("…")
    assert limit == SUMMARY_CHARS


def test_a_stored_template_beyond_the_bounds_renders_the_default_not_megabytes():
    # saved before the check (bypassing validation): rendering never builds the huge text
    rule = AlertRule(name="r", summary="{value:>3000000000}")
    text = render_summary(rule, FIELDS)
    assert text.startswith("r on gpu:1: 91.0") and "summary template" in text
    assert len(text) <= Alert._meta.get_field("summary").max_length
