"""Fixtures for the client's tests against the real running system."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from client import PaymentsClient
from tests.support.control.processes import Process
from tests.support.factories.tenants import TenantHandle


def client_for(api: Process, tenant: TenantHandle, **kwargs: Any) -> PaymentsClient:
    """A client of the running API under `tenant`'s key."""
    assert api.url is not None
    return PaymentsClient(api.url, tenant.api_key, **kwargs)


@pytest.fixture
def payments(api: Process, tenant: TenantHandle) -> Iterator[PaymentsClient]:
    with client_for(api, tenant, deadline=30.0) as client:
        yield client
