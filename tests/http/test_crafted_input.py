"""Crafted input against the running API: always a 4xx problem, never a 500."""

from __future__ import annotations

import httpx
import pytest

from tests.support.factories.payments import new_key, payment_body, post_payment


def assert_problem(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"\\ud800": 1, "\\ud800": 2}', id="duplicate-lone-surrogate"),
        pytest.param(b'{"\\udfff": "x"}', id="unknown-lone-surrogate"),
        pytest.param(b'{"amount": "1", "\\ud800": 1, "\\ud800": 1}', id="after-a-member"),
        pytest.param(b'{"amount": ' + b"1" * 5000 + b"}", id="integer-past-the-digit-limit"),
        pytest.param(b"[" * 20000 + b"]" * 20000, id="deep-nesting"),
    ],
)
def test_crafted_json_is_422(client: httpx.Client, raw: bytes) -> None:
    response = client.post(
        "/payments",
        content=raw,
        headers={"Idempotency-Key": new_key(), "Content-Type": "application/json"},
    )

    assert_problem(response, 422, "VALIDATION_ERROR")


@pytest.mark.parametrize(
    "prefer",
    [
        pytest.param(b"wait=\xb2", id="superscript-two"),
        pytest.param("wait=٣".encode(), id="arabic-indic-three-utf8"),
        pytest.param(b"wait=" + b"9" * 5000, id="huge"),
    ],
)
def test_odd_prefer_wait_is_not_a_500(client: httpx.Client, prefer: bytes) -> None:
    key = new_key()
    assert post_payment(client, payment_body(), key=key).status_code == 201
    # Prefer is read before the key's owner is asked; reusing the key for another body is
    # a 422 once the preference is understood (or ignored).
    response = client.post(
        "/payments",
        json=payment_body(amount="99.00"),
        headers=[(b"Idempotency-Key", key.encode()), (b"Prefer", prefer)],
    )

    assert_problem(response, 422, "IDEMPOTENCY_KEY_REUSED")
