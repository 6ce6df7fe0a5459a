"""The audit log, newest first, for admins."""

from __future__ import annotations

import django_filters
from rest_framework import serializers, viewsets

from controlplane.api.filters import BoundedDateTimeFilter
from controlplane.api.permissions import CanReadAudit
from controlplane.audit.models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = ["id", "at", "actor", "user_id", "via", "address", "action", "target_type",
                  "target_id", "target", "changes"]
        read_only_fields = fields


class AuditFilter(django_filters.FilterSet):
    since = BoundedDateTimeFilter(field_name="at", lookup_expr="gte")
    until = BoundedDateTimeFilter(field_name="at", lookup_expr="lt")
    actor = django_filters.CharFilter(max_length=150)
    action = django_filters.CharFilter(max_length=24)
    target_type = django_filters.CharFilter(max_length=40)
    target_id = django_filters.CharFilter(max_length=64)

    class Meta:
        model = AuditEntry
        fields = ["since", "until", "actor", "action", "target_type", "target_id"]


class AuditViewSet(viewsets.ReadOnlyModelViewSet):
    """Who changed what, when and from where: rules, channels, silences, acks, deployments,
    suggestion decisions, tokens and users. Secrets read "(redacted)". Entries are never
    changed or deleted."""

    queryset = AuditEntry.objects.order_by("-at", "-id")
    serializer_class = AuditEntrySerializer
    permission_classes = [CanReadAudit]
    filterset_class = AuditFilter
    lookup_value_converter = "int"
