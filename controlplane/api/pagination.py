"""Pagination of every API list (settings.REST_FRAMEWORK's DEFAULT_PAGINATION_CLASS)."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination


class BoundedPagination(LimitOffsetPagination):
    # A bound, so that ?limit=10000000 cannot ask for the whole table in one page.
    max_limit = 1000
