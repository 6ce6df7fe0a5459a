"""FilterSets of the fleet, alerting and tuning lists. A bad value is a 400, never ignored."""

from __future__ import annotations

from datetime import UTC, datetime

import django_filters
from django import forms
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from controlplane.alerts.delivery.models import DeliveryState, Notification
from controlplane.alerts.models import Alert, AlertState, Severity, Silence
from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.tuning.models import Suggestion

_BOOLEANS = {"true": True, "false": False, "1": True, "0": False}


class StrictBooleanField(forms.Field):
    def to_python(self, value):
        if value in (None, ""):
            return None
        try:
            return _BOOLEANS[str(value).lower()]
        except KeyError:
            raise forms.ValidationError(f"{value!r} is not a boolean: use true or false") from None


class StrictBooleanFilter(django_filters.BooleanFilter):
    # django-filter's own boolean filter reads "yes" or "maybe" as "no filter" without a word.
    field_class = StrictBooleanField


class BoundedDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO-8601 instant between 1970 and 2100: year 204 at -22:22 would overflow when
    turned to UTC (a 500), and no stored row lies outside anyway."""

    EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
    LATEST = datetime(2100, 1, 1, tzinfo=UTC)

    def to_python(self, value):
        try:
            when = super().to_python(value)
            if when is not None and when.tzinfo is not None:
                when = when.astimezone(UTC)
        except (OverflowError, ValueError):
            raise forms.ValidationError(f"{value!r} is not a time between 1970 and 2100"
                                        ) from None
        if when is not None and not self.EARLIEST <= when < self.LATEST:
            raise forms.ValidationError(f"{value!r} is not a time between 1970 and 2100")
        return when


class BoundedDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = BoundedDateTimeField


@extend_schema_field(OpenApiTypes.INT)
class IdFilter(django_filters.Filter):
    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", 2**31 - 1)  # ids are int4
        super().__init__(*args, **kwargs)


class HostFilter(django_filters.FilterSet):
    hostname = django_filters.CharFilter()
    simulated = StrictBooleanFilter()
    online = StrictBooleanFilter(help_text="Reported within the online window")

    class Meta:
        model = Host
        fields = ["hostname", "simulated", "online"]


class GpuFilter(django_filters.FilterSet):
    host = IdFilter(field_name="host_id", help_text="Host id")
    hostname = django_filters.CharFilter(field_name="host__hostname")
    uuid = django_filters.CharFilter()
    present = StrictBooleanFilter()
    online = StrictBooleanFilter(help_text="Present, and its host is online")

    class Meta:
        model = Gpu
        fields = ["host", "hostname", "uuid", "present", "online"]


class EngineFilter(django_filters.FilterSet):
    host = IdFilter(field_name="host_id", help_text="Host id")
    hostname = django_filters.CharFilter(field_name="host__hostname")
    name = django_filters.CharFilter()
    model = django_filters.CharFilter()
    present = StrictBooleanFilter()
    online = StrictBooleanFilter(help_text="Reported within the online window")

    class Meta:
        model = Engine
        fields = ["host", "hostname", "name", "model", "present", "online"]


class CommaSelectMultiple(forms.SelectMultiple):
    """``?state=firing&state=pending`` and ``?state=firing,pending`` read the same."""

    def value_from_datadict(self, data, files, name):
        values = super().value_from_datadict(data, files, name) or []
        return [part.strip() for value in values for part in value.split(",") if part.strip()]


class AlertFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(
        choices=AlertState.choices, widget=CommaSelectMultiple,
        help_text="Repeat it, or a comma list: firing,pending")
    severity = django_filters.MultipleChoiceFilter(
        field_name="rule__severity", choices=Severity.choices, widget=CommaSelectMultiple,
        help_text="The rule's severity; repeat it, or a comma list")
    rule = IdFilter(field_name="rule_id", help_text="Alert rule id")
    host = IdFilter(field_name="host_id", help_text="Host id")
    acknowledged = StrictBooleanFilter(field_name="acknowledged_at", lookup_expr="isnull",
                                       exclude=True, help_text="Acknowledged (firing only)")

    class Meta:
        model = Alert
        fields = ["state", "severity", "rule", "host", "acknowledged"]


class SilenceFilter(django_filters.FilterSet):
    active = StrictBooleanFilter(method="filter_active",
                                 help_text="Started and not yet ended (now)")

    class Meta:
        model = Silence
        fields = ["active"]

    def filter_active(self, queryset, name, value):
        now = timezone.now()
        current = Q(starts_at__lte=now, ends_at__gt=now)
        return queryset.filter(current) if value else queryset.exclude(current)


class NotificationFilter(django_filters.FilterSet):
    channel = IdFilter(field_name="channel_id", help_text="Channel id")
    state = django_filters.MultipleChoiceFilter(
        choices=DeliveryState.choices, widget=CommaSelectMultiple,
        help_text="Repeat it, or a comma list: retrying,failed")
    test = StrictBooleanFilter(help_text="Sent by \"send test notification\"")

    class Meta:
        model = Notification
        fields = ["channel", "state", "test"]


class SuggestionFilter(django_filters.FilterSet):
    host = IdFilter(method="filter_host", help_text="Host id: of the deployment or the engine")
    watched = StrictBooleanFilter(
        field_name="deployment", lookup_expr="isnull",
        help_text="true: engines Pitwall only watches (no deployment); false: deployments")

    class Meta:
        model = Suggestion
        fields = ["deployment", "engine", "state", "kind", "host", "watched"]

    def filter_host(self, queryset, name, value):
        return queryset.filter(Q(deployment__host_id=value) | Q(engine__host_id=value))
