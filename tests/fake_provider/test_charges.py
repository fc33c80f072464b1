"""The provider's charge API without faults: idempotency, lookups, magic ids, validation."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fake_provider.provider import (
    all_at_once,
    charge_body,
    ledger,
    ledger_for,
    new_account,
    new_key,
    post_charge,
)


def test_healthz(client: httpx.Client) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_new_key_creates_a_succeeded_charge(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account(), reference="order-7")

    response = post_charge(client, key, body)

    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response.headers
    charge = response.json()
    assert charge["charge_id"].startswith("ch_")
    assert charge["status"] == "succeeded"
    assert charge["decline_code"] is None
    assert charge["idempotency_key"] == key
    assert {name: charge[name] for name in body} == body
    assert ledger_for(client, key) == [charge]


def test_same_key_and_body_replays_the_charge(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    first = post_charge(client, key, body)

    replay = post_charge(client, key, body)

    assert replay.status_code == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json()
    assert len(ledger_for(client, key)) == 1


def test_reference_defaults_to_empty_and_replays_as_such(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    del body["reference"]

    first = post_charge(client, key, body)
    replay = post_charge(client, key, {**body, "reference": ""})

    assert first.status_code == 201
    assert first.json()["reference"] == ""
    assert replay.headers["Idempotent-Replayed"] == "true"


@pytest.mark.parametrize(
    "change",
    [
        {"amount_minor": 1251},
        {"currency": "USD"},
        {"account_id": "acc_other"},
        {"reference": "order-2"},
    ],
)
def test_same_key_with_another_body_is_409_and_changes_nothing(
    client: httpx.Client, change: dict[str, Any]
) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    original = post_charge(client, key, body).json()

    response = post_charge(client, key, {**body, **change})

    assert response.status_code == 409
    assert response.json()["error"] == "idempotency_key_reused"
    assert ledger_for(client, key) == [original]


def test_concurrent_identical_charges_with_one_key_create_one_charge(
    client: httpx.Client,
) -> None:
    key, body = new_key(), charge_body(account_id=new_account())

    # One client shared by the threads (it is thread-safe), each call on its own connection.
    responses = all_at_once(50, lambda _: post_charge(client, key, body))

    assert [r.status_code for r in responses] == [201] * 50
    assert len({r.json()["charge_id"] for r in responses}) == 1
    assert sum("Idempotent-Replayed" not in r.headers for r in responses) == 1
    assert len(ledger_for(client, key)) == 1


def test_lookup_by_key_returns_the_charge(client: httpx.Client) -> None:
    key = new_key()
    charge = post_charge(client, key, charge_body(account_id=new_account())).json()

    response = client.get("/charges", params={"idempotency_key": key})

    assert response.status_code == 200
    assert response.json() == charge


def test_lookup_of_unknown_key_is_404(client: httpx.Client) -> None:
    response = client.get("/charges", params={"idempotency_key": new_key()})

    assert response.status_code == 404
    assert response.json() == {"error": "not_found"}


def test_ledger_lists_every_charge_with_its_fields_oldest_first(client: httpx.Client) -> None:
    keys = [new_key(), new_key()]
    made = [post_charge(client, key, charge_body(account_id=new_account())).json() for key in keys]
    declined = post_charge(client, new_key(), charge_body(account_id="acc_decline_lost_card"))

    charges = ledger(client)

    assert [c for c in charges if c["idempotency_key"] in keys] == made
    assert declined.json() in charges
    assert set(charges[0]) == {
        "charge_id",
        "idempotency_key",
        "amount_minor",
        "currency",
        "account_id",
        "reference",
        "status",
        "decline_code",
        "created_at",
        "capture",
        "amount_captured_minor",
        "voided",
    }


def test_decline_account_stores_a_declined_charge_with_its_code(client: httpx.Client) -> None:
    key = new_key()
    body = charge_body(account_id="acc_decline_insufficient_funds")

    response = post_charge(client, key, body)
    replay = post_charge(client, key, body)

    assert response.status_code == 201
    assert response.json()["status"] == "declined"
    assert response.json()["decline_code"] == "insufficient_funds"
    assert replay.json() == response.json()
    assert ledger_for(client, key) == [response.json()]


def test_decline_prefix_without_code_declines_as_card_declined(client: httpx.Client) -> None:
    response = post_charge(client, new_key(), charge_body(account_id="acc_decline_"))

    assert response.json()["status"] == "declined"
    assert response.json()["decline_code"] == "card_declined"


def test_reject_account_is_400_and_stores_nothing(client: httpx.Client) -> None:
    key = new_key()

    response = post_charge(client, key, charge_body(account_id="acc_reject"))

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert response.json()["detail"]
    assert ledger_for(client, key) == []


@pytest.mark.parametrize(
    "body",
    [
        {**charge_body(), "amount_minor": 0},
        {**charge_body(), "amount_minor": -5},
        {**charge_body(), "amount_minor": "1250"},
        {**charge_body(), "amount_minor": 12.5},
        {**charge_body(), "amount_minor": True},
        {**charge_body(), "currency": "eur"},
        {**charge_body(), "currency": "EURO"},
        {**charge_body(), "account_id": ""},
        {**charge_body(), "account_id": "a" * 65},
        {**charge_body(), "reference": "r" * 129},
        {**charge_body(), "unexpected": 1},
        {key: value for key, value in charge_body().items() if key != "amount_minor"},
        [charge_body()],
    ],
)
def test_invalid_body_is_400_invalid_request_and_stores_nothing(
    client: httpx.Client, body: Any
) -> None:
    key = new_key()

    response = client.post("/charges", json=body, headers={"Idempotency-Key": key})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert response.json()["detail"]
    assert ledger_for(client, key) == []


def test_body_that_is_not_json_is_400(client: httpx.Client) -> None:
    key = new_key()

    response = client.post(
        "/charges",
        content=b"amount_minor=5",
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert ledger_for(client, key) == []


def test_missing_idempotency_key_is_400(client: httpx.Client) -> None:
    before = len(ledger(client))

    response = client.post("/charges", json=charge_body(account_id=new_account()))

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert "Idempotency-Key" in response.json()["detail"]
    assert len(ledger(client)) == before


@pytest.mark.parametrize("key", [b"has space", b"k" * 256, "caf\u00e9".encode()])
def test_malformed_idempotency_key_is_400(client: httpx.Client, key: bytes) -> None:
    response = client.post("/charges", json=charge_body(), headers={b"Idempotency-Key": key})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


def test_lookup_with_empty_key_is_400(client: httpx.Client) -> None:
    response = client.get("/charges", params={"idempotency_key": ""})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
