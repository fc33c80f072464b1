"""Request builders for two-step payments: an authorization, its captures and voids."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.factories.payments import new_key, payment_body, post_payment


def authorized(client: httpx.Client, **overrides: Any) -> dict[str, Any]:
    """A manual payment the provider authorized (10.00 EUR unless told otherwise)."""
    response = post_payment(client, payment_body(capture="manual", **overrides), key=new_key())
    assert response.status_code == 201, response.text
    payment: dict[str, Any] = response.json()
    assert payment["status"] == "AUTHORIZED", payment
    return payment


def post_capture(
    client: httpx.Client,
    payment_id: str,
    amount: str | None = None,
    *,
    key: str | None = None,
    body: Any = None,
) -> httpx.Response:
    """`POST /payments/{id}/captures`, with `amount` (absent: the rest), under `key` (a new
    one unless given)."""
    sent = body if body is not None else ({} if amount is None else {"amount": amount})
    return client.post(
        f"/payments/{payment_id}/captures",
        json=sent,
        headers={"Idempotency-Key": key or new_key()},
    )


def post_void(
    client: httpx.Client, payment_id: str, *, key: str | None = None, body: Any = None
) -> httpx.Response:
    """`POST /payments/{id}/void` under `key` (a new one unless given)."""
    return client.post(
        f"/payments/{payment_id}/void",
        json={} if body is None else body,
        headers={"Idempotency-Key": key or new_key()},
    )
