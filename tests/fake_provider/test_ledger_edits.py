"""`/_ledger`: making the provider's books disagree with the service's, for tests."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fake_provider.provider import (
    add_ledger_charge,
    charge_body,
    edit_charge,
    ledger_for,
    listed,
    new_account,
    new_key,
    post_charge,
)


def made(client: httpx.Client, key: str | None = None, amount: int = 1000) -> dict[str, Any]:
    body = charge_body(account_id=new_account(), amount_minor=amount)
    response = post_charge(client, key or new_key(), body)
    assert response.status_code == 201, response.text
    charge: dict[str, Any] = response.json()
    return charge


def listed_charge(client: httpx.Client, charge: dict[str, Any]) -> dict[str, Any] | None:
    at = charge["created_at"]
    found = [
        c
        for page in listed(client, "/charges", created_gte=at, created_lt="9999-01-01")
        for c in page
        if c["charge_id"] == charge["charge_id"]
    ]
    return found[0] if found else None


def test_a_dropped_charge_is_gone_everywhere(client: httpx.Client) -> None:
    key = new_key()
    charge = made(client, key)

    assert client.delete(f"/_ledger/charges/{charge['charge_id']}").status_code == 204

    assert client.get("/charges", params={"idempotency_key": key}).status_code == 404
    assert ledger_for(client, key) == []
    assert listed_charge(client, charge) is None
    again = client.delete(f"/_ledger/charges/{charge['charge_id']}")
    assert (again.status_code, again.json()["error"]) == (404, "not_found")


def test_amount_currency_and_status_can_be_changed(client: httpx.Client) -> None:
    key = new_key()
    charge = made(client, key)

    changed = edit_charge(
        client, charge["charge_id"], amount_minor=999, currency="USD", status="declined"
    )

    assert {k: changed[k] for k in ("amount_minor", "currency", "status", "decline_code")} == {
        "amount_minor": 999,
        "currency": "USD",
        "status": "declined",
        "decline_code": "card_declined",
    }
    assert client.get("/charges", params={"idempotency_key": key}).json() == changed
    shown = listed_charge(client, changed)
    assert shown is not None
    assert (shown["amount_minor"], shown["currency"], shown["status"]) == (999, "USD", "declined")
    # The request that made it no longer matches what the provider holds.
    replay = post_charge(client, key, charge_body(account_id=charge["account_id"]))
    assert replay.status_code == 409
    back = edit_charge(client, charge["charge_id"], status="succeeded")
    assert (back["status"], back["decline_code"]) == ("succeeded", None)


def test_an_orphan_charge_is_found_under_its_key(client: httpx.Client) -> None:
    key = new_key()

    orphan = add_ledger_charge(client, idempotency_key=key, amount_minor=4200, currency="EUR")

    assert orphan["account_id"] == "acc_orphan"
    assert orphan["status"] == "succeeded"
    assert client.get("/charges", params={"idempotency_key": key}).json() == orphan
    taken = client.post(
        "/_ledger/charges", json={"idempotency_key": key, "amount_minor": 1, "currency": "EUR"}
    )
    assert (taken.status_code, taken.json()["error"]) == (409, "conflict")


def test_refunds_can_be_changed_and_dropped(client: httpx.Client) -> None:
    charge = made(client, amount=1000)
    refund = client.post(
        "/refunds",
        json={"charge_id": charge["charge_id"], "amount_minor": 400},
        headers={"Idempotency-Key": new_key()},
    ).json()
    refund_url = f"/_ledger/refunds/{refund['refund_id']}"

    kept = client.delete(f"/_ledger/charges/{charge['charge_id']}")
    assert (kept.status_code, kept.json()["error"]) == (409, "conflict")

    bigger = client.patch(refund_url, json={"amount_minor": 1000})
    assert (bigger.status_code, bigger.json()["amount_minor"]) == (200, 1000)
    shown = listed_charge(client, charge)
    assert shown is not None
    assert (shown["status"], shown["amount_refunded_minor"]) == ("refunded", 1000)

    assert client.delete(refund_url).status_code == 204
    shown = listed_charge(client, charge)
    assert shown is not None
    assert (shown["status"], shown["amount_refunded_minor"]) == ("succeeded", 0)
    assert (
        client.get("/refunds", params={"idempotency_key": refund["idempotency_key"]}).status_code
        == 404
    )
    assert client.delete(f"/_ledger/charges/{charge['charge_id']}").status_code == 204


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("PATCH", "/_ledger/charges/ch_nobody", {"amount_minor": 1}, 404),
        ("PATCH", "/_ledger/refunds/re_nobody", {"amount_minor": 1}, 404),
        ("DELETE", "/_ledger/refunds/re_nobody", None, 404),
        ("PATCH", "/_ledger/charges/{charge}", {}, 400),
        ("PATCH", "/_ledger/charges/{charge}", {"amount_minor": 0}, 400),
        ("PATCH", "/_ledger/charges/{charge}", {"currency": "eur"}, 400),
        ("PATCH", "/_ledger/charges/{charge}", {"status": "refunded"}, 400),
        ("PATCH", "/_ledger/charges/{charge}", {"created_at": "2024-01-01T00:00:00"}, 400),
        ("PATCH", "/_ledger/charges/{charge}", {"account_id": "acc_x"}, 400),
        ("POST", "/_ledger/charges", {"amount_minor": 1, "currency": "EUR"}, 400),
        (
            "POST",
            "/_ledger/charges",
            {"idempotency_key": "k", "amount_minor": 1, "currency": "EUR", "created_at": "x"},
            400,
        ),
    ],
)
def test_a_bad_edit_changes_nothing(
    client: httpx.Client, method: str, path: str, body: dict[str, Any] | None, status: int
) -> None:
    charge = made(client)
    path = path.format(charge=charge["charge_id"])

    response = client.request(method, path, json=body)

    assert response.status_code == status, response.text
    assert "detail" in response.json()
    assert client.get("/charges", params={"idempotency_key": charge["idempotency_key"]}).json() == (
        charge
    )
