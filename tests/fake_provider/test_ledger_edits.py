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


def test_many_charges_and_refunds_change_in_one_call(client: httpx.Client) -> None:
    charges = [made(client, amount=1000 + n) for n in range(3)]
    refund = client.post(
        "/refunds",
        json={"charge_id": charges[0]["charge_id"], "amount_minor": 400},
        headers={"Idempotency-Key": new_key()},
    ).json()
    moved = "2001-02-03T04:05:06.000007Z"

    charged = client.patch(
        "/_ledger/charges",
        json={
            "changes": [
                {"charge_id": charges[0]["charge_id"], "created_at": moved},
                {"charge_id": charges[1]["charge_id"], "created_at": moved, "amount_minor": 5},
                {"charge_id": charges[2]["charge_id"], "status": "declined"},
            ]
        },
    )
    refunded = client.patch(
        "/_ledger/refunds",
        json={"changes": [{"refund_id": refund["refund_id"], "amount_minor": 300}]},
    )

    assert (charged.status_code, charged.json()) == (200, {"changed": 3})
    assert (refunded.status_code, refunded.json()) == (200, {"changed": 1})
    day = [
        c
        for page in listed(client, "/charges", created_gte="2001-02-03", created_lt="2001-02-04")
        for c in page
    ]
    assert [(c["charge_id"], c["created_at"]) for c in day] == sorted(
        [(charges[0]["charge_id"], moved), (charges[1]["charge_id"], moved)]
    )
    shown = {c["charge_id"]: c for c in day}
    assert (
        shown[charges[0]["charge_id"]]["amount_refunded_minor"],
        shown[charges[1]["charge_id"]]["amount_minor"],
    ) == (300, 5)
    declined = client.get("/charges", params={"idempotency_key": charges[2]["idempotency_key"]})
    assert (declined.json()["status"], declined.json()["decline_code"]) == (
        "declined",
        "card_declined",
    )
    shown_declined = listed_charge(client, charges[2])
    assert shown_declined is not None
    assert shown_declined["status"] == "declined"


@pytest.mark.parametrize(
    ("last", "status", "detail"),
    [
        ({"charge_id": "ch_nobody", "amount_minor": 1}, 404, "no charge ch_nobody"),
        ({"charge_id": "{charge}"}, 400, "changes.1: nothing to change"),
        ({"charge_id": "{charge}", "created_at": "x"}, 400, "changes.1: created_at:"),
        ({"charge_id": "{charge}", "amount_minor": 0}, 400, "changes.1.amount_minor"),
        ({"amount_minor": 1}, 400, "changes.1.charge_id"),
    ],
)
def test_many_changes_are_made_all_or_none(
    client: httpx.Client, last: dict[str, Any], status: int, detail: str
) -> None:
    first, second = made(client), made(client)
    last = {
        k: v.format(charge=second["charge_id"]) if isinstance(v, str) else v
        for k, v in last.items()
    }

    response = client.patch(
        "/_ledger/charges",
        json={"changes": [{"charge_id": first["charge_id"], "amount_minor": 7}, last]},
    )

    assert response.status_code == status, response.text
    assert detail in response.json()["detail"]
    for charge in (first, second):
        held = client.get("/charges", params={"idempotency_key": charge["idempotency_key"]})
        assert held.json() == charge
    shown = listed_charge(client, first)
    assert shown is not None
    assert shown["amount_minor"] == first["amount_minor"]


def test_a_change_of_none_or_of_an_unknown_refund_is_refused(client: httpx.Client) -> None:
    empty = client.patch("/_ledger/charges", json={"changes": []})
    unknown = client.patch(
        "/_ledger/refunds", json={"changes": [{"refund_id": "re_nobody", "amount_minor": 1}]}
    )

    assert (empty.status_code, empty.json()["error"]) == (400, "invalid_request")
    assert (unknown.status_code, unknown.json()["error"]) == (404, "not_found")
