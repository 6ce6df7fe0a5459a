"""FilterSets of the fleet lists. A filter value that does not parse is a 400, never ignored."""

from __future__ import annotations

import django_filters
from django import forms
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from controlplane.fleet.models import Engine, Gpu, Host

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
