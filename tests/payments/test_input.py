"""Bad input to POST /payments: a clear, documented error, and nothing stored."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle


@pytest.fixture
def nothing_stored(db: psycopg.Connection[DictRow], tenant: TenantHandle) -> Iterator[None]:
    yield
    for table in ("operations", "payments"):
        row = db.execute(f"SELECT count(*) AS n FROM {table} WHERE tenant_id = %s", (tenant.id,))
        assert row.fetchone() == {"n": 0}, f"{table} has rows"


def _problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    assert body["status"] == status
    assert body["detail"]
    return body


@pytest.mark.usefixtures("nothing_stored")
def test_missing_api_key_is_401(client: httpx.Client) -> None:
    response = client.post(
        "/payments",
        json=payment_body(),
        headers={"Authorization": "", "Idempotency-Key": new_key()},
    )
    _problem(response, 401, "UNAUTHENTICATED")
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.usefixtures("nothing_stored")
def test_unknown_api_key_is_401(client: httpx.Client) -> None:
    response = client.post(
        "/payments",
        json=payment_body(),
        headers={"Authorization": "Bearer sk_not_a_key", "Idempotency-Key": new_key()},
    )
    _problem(response, 401, "UNAUTHENTICATED")


@pytest.mark.usefixtures("nothing_stored")
def test_missing_idempotency_key_is_400(client: httpx.Client) -> None:
    _problem(post_payment(client, key=None), 400, "IDEMPOTENCY_KEY_MISSING")


@pytest.mark.usefixtures("nothing_stored")
@pytest.mark.parametrize(
    "raw_key",
    [
        "",
        '""',
        "a" * 256,
        '"' + "a" * 256 + '"',
        "has space",
        '"has space"',
        "tab\tinside",
        '"unterminated',
        '"a" "b"',
        '"bad\\escape"',
        "caf\u00e9",
    ],
)
def test_malformed_idempotency_key_is_400(client: httpx.Client, raw_key: str) -> None:
    response = client.post(
        "/payments",
        content=b'{"amount":"1.00","currency":"EUR","account_id":"acc_1"}',
        headers=[
            (b"Content-Type", b"application/json"),
            (b"Idempotency-Key", raw_key.encode("latin-1")),
        ],
    )
    _problem(response, 400, "IDEMPOTENCY_KEY_INVALID")


@pytest.mark.usefixtures("nothing_stored")
def test_idempotency_key_sent_twice_is_400(client: httpx.Client) -> None:
    response = client.post(
        "/payments",
        json=payment_body(),
        headers=[("Idempotency-Key", "one"), ("Idempotency-Key", "two")],
    )
    _problem(response, 400, "IDEMPOTENCY_KEY_INVALID")


def test_quoted_and_bare_forms_name_the_same_key(client: httpx.Client) -> None:
    body = payment_body()
    bare = post_payment(client, body, key="order-77.a_b~c")
    quoted = post_payment(client, body, key='"order-77.a_b~c"')
    assert bare.status_code == quoted.status_code == 201
    assert quoted.content == bare.content
    assert quoted.headers["idempotent-replayed"] == "true"
    longest = post_payment(client, payment_body(), key="k" * 255)
    assert longest.status_code == 201


@pytest.mark.usefixtures("nothing_stored")
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"amount": 10.0}, "amount"),
        ({"amount": 10}, "amount"),
        ({"amount": "0"}, "amount"),
        ({"amount": "0.00"}, "amount"),
        ({"amount": "-1.00"}, "amount"),
        ({"amount": "10.001"}, "amount"),
        ({"amount": "1e3"}, "amount"),
        ({"amount": " 1.00"}, "amount"),
        ({"amount": "100.5", "currency": "JPY"}, "amount"),
        ({"amount": "1.0001", "currency": "KWD"}, "amount"),
        ({"currency": "XYZ"}, "currency"),
        ({"currency": "EURO"}, "currency"),
        ({"currency": 978}, "currency"),
        ({"account_id": ""}, "account_id"),
        ({"account_id": "a" * 65}, "account_id"),
        ({"account_id": "acc\u0000nul"}, "account_id"),
        ({"merchant_reference": "r" * 129}, "merchant_reference"),
        ({"description": "d" * 501}, "description"),
        ({"metadata": {f"k{i}": "v" for i in range(21)}}, "metadata"),
        ({"metadata": {"k" * 41: "v"}}, "metadata"),
        ({"metadata": {"k": "v" * 501}}, "metadata"),
        ({"metadata": {"k": 1}}, "metadata"),
        ({"metadata": ["k"]}, "metadata"),
        ({"unexpected": "member"}, "unexpected"),
        ({"amount": None}, "amount"),
    ],
)
def test_invalid_body_is_422_naming_the_field(
    client: httpx.Client, change: dict[str, Any], field: str
) -> None:
    body = {**payment_body(), **change}
    if change.get("amount", "") is None:
        del body["amount"]
    problem = _problem(post_payment(client, body, key=new_key()), 422, "VALIDATION_ERROR")
    assert any(e["field"].split(".")[0] == field for e in problem["errors"]), problem


@pytest.mark.usefixtures("nothing_stored")
@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"[]", b'"a string"', b'{"amount":"1.00","amount":"2.00"}', b"\xff\xfe"],
)
def test_malformed_json_is_422(client: httpx.Client, raw: bytes) -> None:
    response = client.post(
        "/payments",
        content=raw,
        headers={"Idempotency-Key": new_key(), "Content-Type": "application/json"},
    )
    _problem(response, 422, "VALIDATION_ERROR")


@pytest.mark.usefixtures("nothing_stored")
def test_body_not_declared_json_is_415(client: httpx.Client) -> None:
    response = client.post(
        "/payments",
        content=b"amount=10.00",
        headers={
            "Idempotency-Key": new_key(),
            "Content-Type": "application/x-www-form-urlencoded",
        },
    )
    _problem(response, 415, "UNSUPPORTED_MEDIA_TYPE")


@pytest.mark.usefixtures("nothing_stored")
def test_body_over_64_kib_is_413(client: httpx.Client) -> None:
    body = {**payment_body(), "description": "x" * (65 * 1024)}
    _problem(post_payment(client, body, key=new_key()), 413, "PAYLOAD_TOO_LARGE")


@pytest.mark.usefixtures("nothing_stored")
def test_ten_megabyte_body_is_413(client: httpx.Client) -> None:
    response = client.post(
        "/payments",
        content=b"{" + b" " * (10 * 1024 * 1024) + b"}",
        headers={"Idempotency-Key": new_key(), "Content-Type": "application/json"},
    )
    _problem(response, 413, "PAYLOAD_TOO_LARGE")


@pytest.mark.usefixtures("nothing_stored")
def test_streamed_body_over_64_kib_without_length_is_413(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"description":"'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}'

    response = client.post(
        "/payments",
        content=chunks(),
        headers={"Idempotency-Key": new_key(), "Content-Type": "application/json"},
    )
    _problem(response, 413, "PAYLOAD_TOO_LARGE")


def test_optional_members_default_and_unicode_round_trips(client: httpx.Client) -> None:
    body = {
        "amount": "500",
        "currency": "jpy",
        "account_id": "acc_ünïcødé_✓",
        "description": "Zahlung für Bestellung №42 — 日本語\nzweite Zeile",
        "metadata": {"emoji": "🧾", "ключ": "значение"},
    }
    response = post_payment(client, body, key=new_key())
    assert response.status_code == 201, response.text
    payment = response.json()
    assert payment["amount"] == "500"
    assert payment["currency"] == "JPY"
    assert payment["merchant_reference"] is None
    assert payment["description"] == body["description"]
    assert payment["metadata"] == body["metadata"]
    assert client.get(f"/payments/{payment['payment_id']}").json() == payment
