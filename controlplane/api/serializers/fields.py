"""Read-only fields whose JSON shape the OpenAPI schema states exactly."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

_INTS = {"type": "array", "items": {"type": "integer"}}


@extend_schema_field({
    "type": "array",
    "items": {"type": "object", "properties": {"id": {"type": "integer"}, "cpus": _INTS}},
})
class NumaNodesField(serializers.JSONField):
    pass


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class StringListField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": True})
class ObjectField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": True, "nullable": True})
class NullableObjectField(serializers.JSONField):
    pass
