"""API clients as the tests need them."""

from __future__ import annotations

from rest_framework.test import APIClient


def bearer_client(token: str) -> APIClient:
    """An API client that sends ``token`` (an API or agent token) with every request."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client
