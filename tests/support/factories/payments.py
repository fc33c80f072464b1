"""Request builders for payment tests: plain functions with keyword defaults, and a
request sent from another thread."""

from __future__ import annotations

import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx

from tests.support.control.processes import Process
from tests.support.factories.tenants import TenantHandle

Row = dict[str, Any]


def new_key() -> str:
    return f"key-{uuid.uuid4()}"


def new_account() -> str:
    """An account id no other test uses, so faults filtered on it hit only this test."""
    return f"acc_{uuid.uuid4().hex[:16]}"


def payment_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "amount": "10.00",
        "currency": "EUR",
        "account_id": new_account(),
        "merchant_reference": "order-1",
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def post_payment(
    client: httpx.Client,
    body: dict[str, Any] | None = None,
    *,
    key: str | None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    all_headers = dict(headers or {})
    if key is not None:
        all_headers["Idempotency-Key"] = key
    return client.post("/payments", json=body or payment_body(), headers=all_headers)


def post_in_background(
    pool: ThreadPoolExecutor, api: Process, tenant: TenantHandle, key: str, body: Row
) -> Future[httpx.Response]:
    """Send `POST /payments` from another thread; the future holds the answer or the error."""
    assert api.url is not None
    url = api.url

    def post() -> httpx.Response:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {tenant.api_key}"}, timeout=120
        ) as http:
            return http.post("/payments", json=body, headers={"Idempotency-Key": key})

    return pool.submit(post)
