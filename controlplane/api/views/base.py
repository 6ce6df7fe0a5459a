"""What the fleet viewsets share: auth policy, id lookups, queryset annotations."""

from __future__ import annotations

from django.db.models import (
    BooleanField,
    Case,
    Count,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from rest_framework import viewsets

from controlplane.api.permissions import CanReadFleet


class FleetViewSet(viewsets.ReadOnlyModelViewSet):
    permission_classes = [CanReadFleet]
    lookup_value_converter = "int"  # ids only; "/hosts/x/" is a 404 before any query


def online_flag(condition: Q):
    """A boolean annotation: True where ``condition`` holds, False otherwise (NULLs included).

    Annotated rather than computed per object so that the ``online`` filter and the ``online``
    field read the same cutoff, in one query.
    """
    return Case(When(condition, then=Value(True)), default=Value(False),
                output_field=BooleanField())


def count_of(model, **filters):
    """The number of ``model`` rows of each host, as a subquery (no join fan-out)."""
    rows = (model.objects.filter(host=OuterRef("pk"), **filters).order_by()
            .values("host").annotate(n=Count("*")).values("n"))
    return Coalesce(Subquery(rows, output_field=IntegerField()), 0)
