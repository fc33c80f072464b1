"""A provider that cannot be reached is answered "not sent", whatever way it fails to connect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.control.processes import Process
from tests.support.control.system import start_api
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.servers.listeners import unaccepting_listener


@pytest.fixture
def api_with_hanging_provider(
    work_dir: Path, base_env: dict[str, str], tenant: TenantHandle
) -> Iterator[httpx.Client]:
    """An API whose provider accepts no connections: every connect hangs until it times out."""
    with unaccepting_listener() as provider_url:
        process: Process = start_api(
            work_dir / "logs", {**base_env, "PAYMENTS_PROVIDER_URL": provider_url}
        )
        try:
            with api_client(process, tenant) as http:
                yield http
        finally:
            process.stop()


def test_connect_that_hangs_is_503_and_failed_retryable(
    api_with_hanging_provider: httpx.Client,
) -> None:
    key = new_key()
    response = post_payment(api_with_hanging_provider, payment_body(), key=key)

    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "PROVIDER_UNAVAILABLE"
    assert "retry-after" in response.headers
    operation = api_with_hanging_provider.get("/operations", params={"idempotency_key": key})
    assert operation.status_code == 200, operation.text
    assert operation.json()["state"] == "FAILED_RETRYABLE"
