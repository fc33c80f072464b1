"""Reading operations and payments: the polling path for unknown outcomes."""

from __future__ import annotations

import uuid

import httpx

from tests.support.control.faults import FaultInjector
from tests.support.factories.payments import new_key, payment_body, post_payment


def test_operation_by_id_and_by_key_show_result_and_history(client: httpx.Client) -> None:
    key = new_key()
    created = post_payment(client, payment_body(), key=key)
    operation_id = created.json()["operation_id"]

    by_id = client.get(f"/operations/{operation_id}")
    by_key = client.get("/operations", params={"idempotency_key": key})

    assert by_id.status_code == by_key.status_code == 200
    assert by_id.json() == by_key.json()
    operation = by_id.json()
    assert operation["state"] == "COMPLETED"
    assert operation["idempotency_key"] == key
    assert operation["payment_id"] == created.json()["payment_id"]
    assert operation["attempts"] == 0
    assert operation["needs_attention"] is False
    assert operation["next_check_at"] is None
    assert operation["result"] == {"status_code": 201, "body": created.json()}
    history = operation["history"]
    assert [(h["from_state"], h["to_state"]) for h in history] == [
        (None, "RECEIVED"),
        ("RECEIVED", "PROVIDER_REQUEST_SENT"),
        ("PROVIDER_REQUEST_SENT", "COMPLETED"),
    ]
    # Claimed and sent by the service; the provider's answer completed it.
    assert [h["actor"] for h in history] == ["system", "system", "provider"]
    assert all(h["reason"] is None and h["at"] for h in history)


def test_unknown_operation_has_no_result_and_a_next_check(
    client: httpx.Client, faults: FaultInjector
) -> None:
    body = payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    accepted = post_payment(client, body, key=new_key())
    operation = client.get(accepted.headers["location"]).json()
    assert operation["state"] == "UNKNOWN_REQUIRES_RECOVERY"
    assert operation["result"] is None
    assert operation["next_check_at"] is not None
    payment = client.get(f"/payments/{operation['payment_id']}").json()
    assert payment["status"] == "PENDING"
    assert payment["provider_charge_id"] is None


def test_unknown_ids_and_keys_are_404(client: httpx.Client) -> None:
    for path in (
        f"/operations/{uuid.uuid4()}",
        "/operations/not-a-uuid",
        f"/payments/{uuid.uuid4()}",
        "/payments/not-a-uuid",
    ):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["code"] == "NOT_FOUND"
    missing = client.get("/operations", params={"idempotency_key": new_key()})
    assert missing.status_code == 404


def test_reads_need_an_api_key(client: httpx.Client) -> None:
    created = post_payment(client, payment_body(), key=new_key())
    response = httpx.get(f"{client.base_url}/payments/{created.json()['payment_id']}", timeout=10)
    assert response.status_code == 401
    assert response.json()["code"] == "UNAUTHENTICATED"
