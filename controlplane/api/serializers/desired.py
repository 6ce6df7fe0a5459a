"""What the serializers of a desired config (a deployment's, a service's) share: the request's
fields laid over the stored config (or a new one) and checked whole by the domain's own
``check``, so that the API refuses exactly what the pages and the domain refuse; env values
sent back as the redacted placeholder keep the values held, and every reader sees them
redacted; what in the config loads code."""

from __future__ import annotations

import copy
from collections.abc import Callable

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Model
from drf_spectacular.utils import extend_schema_field

from controlplane.api.serializers.alerts import drf_errors
from controlplane.api.serializers.fields import StringListField
from controlplane.fleet import deployments


class CheckedDraft:
    """Mixin for a ModelSerializer: ``draft_model`` is the model, ``draft_check`` (a
    staticmethod) the domain's check, ``_save(instance, data)`` the domain's save."""

    draft_model: type[Model]
    draft_check: Callable[[Model], None]

    def validate(self, attrs):
        if "env" in attrs:  # the placeholder sent back keeps the value held
            held = self.instance.env if self.instance is not None else {}
            attrs["env"] = deployments.resolve_env(attrs["env"], held)
        draft = copy.copy(self.instance) if self.instance is not None else self.draft_model()
        for name, value in attrs.items():
            if name != "reason":
                setattr(draft, name, value)
        try:
            type(self).draft_check(draft)
        except DjangoValidationError as exc:
            raise drf_errors(exc) from None
        return attrs

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["env"] = deployments.redact_env(data.get("env") or {})
        return data

    @extend_schema_field(StringListField)
    def get_code_loading_args(self, instance) -> list[str]:
        return deployments.code_loading({"args": instance.args})["args"]

    @extend_schema_field(StringListField)
    def get_code_loading_env(self, instance) -> list[str]:
        return deployments.code_loading({"env": instance.env})["env"]

    def create(self, validated_data):
        return self._save(self.draft_model(), validated_data)

    def update(self, instance, validated_data):
        return self._save(instance, validated_data)
