"""Request builders for refund tests: plain functions with keyword defaults, and a
request sent from another thread."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx

from tests.support.control.processes import Process
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle


def paid(client: httpx.Client, **overrides: Any) -> dict[str, Any]:
    """A payment the provider approved (10.00 EUR unless told otherwise), as answered."""
    response = post_payment(client, payment_body(**overrides), key=new_key())
    assert response.status_code == 201, response.text
    payment: dict[str, Any] = response.json()
    return payment


def refund_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"amount": "4.00", "reason": "requested_by_customer"}
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def post_refund(
    client: httpx.Client,
    payment_id: str,
    body: dict[str, Any] | None = None,
    *,
    key: str | None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    all_headers = dict(headers or {})
    if key is not None:
        all_headers["Idempotency-Key"] = key
    return client.post(
        f"/payments/{payment_id}/refunds", json=body or refund_body(), headers=all_headers
    )


def refund_in_background(
    pool: ThreadPoolExecutor,
    api: Process,
    tenant: TenantHandle,
    payment_id: str,
    key: str,
    body: dict[str, Any],
) -> Future[httpx.Response]:
    """Send a refund from another thread; the future holds the answer or the error."""
    assert api.url is not None
    url = api.url

    def post() -> httpx.Response:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {tenant.api_key}"}, timeout=120
        ) as http:
            return post_refund(http, payment_id, body, key=key)

    return pool.submit(post)
