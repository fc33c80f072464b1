"""POST /payments: the first request with a key, every outcome row of the spec's table."""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.factories.payments import new_key, payment_body, post_payment


def test_approved_payment_is_201_with_location_and_one_charge(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    body = payment_body(amount="12.34", currency="eur", metadata={"order": "42"})
    response = post_payment(client, body, key=new_key())

    assert response.status_code == 201, response.text
    payment = response.json()
    assert response.headers["location"] == f"/payments/{payment['payment_id']}"
    assert "idempotent-replayed" not in response.headers
    assert payment["status"] == "SUCCEEDED"
    assert payment["amount"] == "12.34"
    assert payment["currency"] == "EUR"
    assert payment["metadata"] == {"order": "42"}
    assert payment["provider_charge_id"]
    charges = faults.charges(account_id=body["account_id"])
    assert len(charges) == 1
    assert charges[0]["amount_minor"] == 1234
    assert charges[0]["charge_id"] == payment["provider_charge_id"]
    op = db.execute(
        "SELECT state, response_status FROM operations WHERE id = %s", (payment["operation_id"],)
    ).fetchone()
    assert op == {"state": "COMPLETED", "response_status": 201}


def test_declined_payment_is_402_with_decline_code_and_stored(
    client: httpx.Client, db: psycopg.Connection[DictRow]
) -> None:
    key = new_key()
    body = payment_body(account_id="acc_decline_insufficient_funds")
    response = post_payment(client, body, key=key)

    assert response.status_code == 402, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "insufficient_funds"
    payment = client.get(f"/payments/{problem['payment_id']}").json()
    assert payment["status"] == "DECLINED"
    op = db.execute("SELECT state FROM operations WHERE id = %s", (problem["operation_id"],))
    assert op.fetchone() == {"state": "COMPLETED"}
    replay = post_payment(client, body, key=key)
    assert replay.status_code == 402
    assert replay.content == response.content
    assert replay.headers["idempotent-replayed"] == "true"


def test_rejected_payment_is_502_failed_and_nothing_charged(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    key = new_key()
    body = payment_body(account_id="acc_reject")
    before = len(faults.charges(account_id="acc_reject"))
    response = post_payment(client, body, key=key)

    assert response.status_code == 502, response.text
    problem = response.json()
    assert problem["code"] == "PROVIDER_REJECTED"
    op = db.execute("SELECT state FROM operations WHERE id = %s", (problem["operation_id"],))
    assert op.fetchone() == {"state": "FAILED"}
    assert len(faults.charges(account_id="acc_reject")) == before
    replay = post_payment(client, body, key=key)
    assert (replay.status_code, replay.content) == (502, response.content)


def test_provider_unavailable_is_503_retryable_and_retry_drives_the_same_payment(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    key = new_key()
    body = payment_body()
    faults.add("unavailable", account_id=body["account_id"])
    first = post_payment(client, body, key=key)

    assert first.status_code == 503, first.text
    assert first.json()["code"] == "PROVIDER_UNAVAILABLE"
    assert int(first.headers["retry-after"]) >= 1
    operation_id = first.json()["operation_id"]
    state = db.execute("SELECT state FROM operations WHERE id = %s", (operation_id,)).fetchone()
    assert state == {"state": "FAILED_RETRYABLE"}
    assert faults.charges(account_id=body["account_id"]) == []

    retry = post_payment(client, body, key=key)
    assert retry.status_code == 201, retry.text
    assert retry.json()["operation_id"] == operation_id
    assert retry.json()["payment_id"] == first.json()["payment_id"]
    charges = faults.charges(account_id=body["account_id"])
    assert len(charges) == 1
    provider_key = db.execute(
        "SELECT provider_key FROM payments WHERE operation_id = %s", (operation_id,)
    ).fetchone()
    assert provider_key == {"provider_key": charges[0]["idempotency_key"]}


def test_provider_error_after_commit_is_202_unknown_with_operation_body(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    body = payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    response = post_payment(client, body, key=new_key())

    assert response.status_code == 202, response.text
    operation = response.json()
    assert operation["state"] == "UNKNOWN_REQUIRES_RECOVERY"
    assert response.headers["location"] == f"/operations/{operation['operation_id']}"
    assert int(response.headers["retry-after"]) >= 1
    assert operation["result"] is None
    assert [h["to_state"] for h in operation["history"]] == [
        "RECEIVED",
        "PROVIDER_REQUEST_SENT",
        "UNKNOWN_REQUIRES_RECOVERY",
    ]
    assert len(faults.charges(account_id=body["account_id"])) == 1


def test_provider_timeout_after_commit_is_202_unknown(
    client: httpx.Client, faults: FaultInjector
) -> None:
    body = payment_body()
    faults.add("timeout_after_commit", account_id=body["account_id"], delay_s=5)
    response = post_payment(client, body, key=new_key())

    assert response.status_code == 202, response.text
    assert response.json()["state"] == "UNKNOWN_REQUIRES_RECOVERY"


def test_provider_connection_refused_is_503_not_sent(
    api_without_provider: httpx.Client, db: psycopg.Connection[DictRow]
) -> None:
    response = post_payment(api_without_provider, payment_body(), key=new_key())

    assert response.status_code == 503, response.text
    assert response.json()["code"] == "PROVIDER_UNAVAILABLE"
    state = db.execute(
        "SELECT state FROM operations WHERE id = %s", (response.json()["operation_id"],)
    ).fetchone()
    assert state == {"state": "FAILED_RETRYABLE"}
