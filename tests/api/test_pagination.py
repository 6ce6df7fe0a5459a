"""Every API list is paginated and bounded: ``?limit=10000000`` cannot ask for a whole table."""

from __future__ import annotations

import pytest
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from controlplane.api.urls import router


@pytest.mark.parametrize(("prefix", "viewset"), [(p, v) for p, v, _ in router.registry])
def test_a_list_gives_at_most_a_thousand_rows_a_page(prefix, viewset):
    request = Request(APIRequestFactory().get(f"/api/v1/{prefix}/", {"limit": 10_000_000}))
    paginator = viewset().paginator
    assert paginator is not None and paginator.get_limit(request) == 1000
