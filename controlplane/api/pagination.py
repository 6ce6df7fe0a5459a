"""Pagination of the fleet lists."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination


class FleetPagination(LimitOffsetPagination):
    # A bound, so that ?limit=10000000 cannot ask for the whole table in one page.
    max_limit = 1000
