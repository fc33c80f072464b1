"""Refunds through the real API, PostgreSQL and fake provider: outcomes, replays, refusals."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.system import PROVIDER_AUTH
from tests.support.factories.payments import new_key
from tests.support.factories.refunds import paid, post_refund, refund_body
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant
from tests.support.readers.operations import refund_operation

REFUND_FIELDS = {
    "refund_id",
    "payment_id",
    "operation_id",
    "status",
    "amount",
    "currency",
    "reason",
    "metadata",
    "provider_refund_id",
    "created_at",
    "updated_at",
}


def test_refunds_succeed_and_the_payment_shows_what_was_refunded(
    client: httpx.Client, faults: FaultInjector
) -> None:
    payment = paid(client)
    pid = payment["payment_id"]
    assert payment["amount_refunded"] == "0.00"

    first = post_refund(client, pid, refund_body(amount="4.00", metadata={"a": "b"}), key=new_key())
    assert first.status_code == 201, first.text
    refund = first.json()
    assert set(refund) == REFUND_FIELDS
    assert refund["status"] == "SUCCEEDED"
    assert (refund["amount"], refund["currency"]) == ("4.00", "EUR")
    assert refund["reason"] == "requested_by_customer"
    assert refund["metadata"] == {"a": "b"}
    assert first.headers["location"] == f"/refunds/{refund['refund_id']}"
    provider = faults.refunds(refund_id=refund["provider_refund_id"])
    assert len(provider) == 1
    assert provider[0]["amount_minor"] == 400
    assert provider[0]["charge_id"] == payment["provider_charge_id"]
    assert provider[0]["idempotency_key"] == f"refund-{refund['refund_id']}"

    after = client.get(f"/payments/{pid}").json()
    assert (after["status"], after["amount_refunded"]) == ("PARTIALLY_REFUNDED", "4.00")
    assert client.get(f"/refunds/{refund['refund_id']}").json() == refund

    rest = post_refund(client, pid, refund_body(amount="6", reason=None), key=new_key())
    assert rest.status_code == 201, rest.text
    after = client.get(f"/payments/{pid}").json()
    assert (after["status"], after["amount_refunded"]) == ("REFUNDED", "10.00")
    listed = client.get(f"/payments/{pid}/refunds").json()
    assert [r["refund_id"] for r in listed["data"]] == [
        refund["refund_id"],
        rest.json()["refund_id"],
    ]
    assert listed["has_more"] is False
    page = client.get(f"/payments/{pid}/refunds", params={"limit": 1}).json()
    assert (len(page["data"]), page["has_more"]) == (1, True)

    operation = client.get(f"/operations/{refund['operation_id']}").json()
    assert operation["operation"] == "create_refund"
    by_key = client.get("/operations", params={"idempotency_key": operation["idempotency_key"]})
    assert by_key.status_code == 404  # a payment's key scope by default
    by_key = client.get(
        "/operations",
        params={"idempotency_key": operation["idempotency_key"], "operation": "create_refund"},
    )
    assert by_key.json()["operation_id"] == refund["operation_id"]
    assert (operation["payment_id"], operation["refund_id"]) == (pid, refund["refund_id"])
    assert [h["trigger"] for h in operation["history"]] == ["claim", "send", "complete"]


def test_a_repeated_key_replays_and_a_reused_key_is_refused(
    client: httpx.Client, faults: FaultInjector
) -> None:
    payment, other = paid(client), paid(client)
    key, body = new_key(), refund_body(amount="2.50")
    first = post_refund(client, payment["payment_id"], body, key=key)
    assert first.status_code == 201, first.text
    again = post_refund(client, payment["payment_id"], {**body, "amount": "2.5"}, key=key)
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert len(faults.refunds(charge_id=payment["provider_charge_id"])) == 1

    for payment_id, changed in [
        (payment["payment_id"], {**body, "amount": "2.00"}),
        (payment["payment_id"], {**body, "reason": "duplicate"}),
        (other["payment_id"], body),
    ]:
        reused = post_refund(client, payment_id, changed, key=key)
        assert reused.status_code == 422, reused.text
        assert reused.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert client.get(f"/payments/{payment['payment_id']}").json()["amount_refunded"] == "2.50"
    assert faults.refunds(charge_id=other["provider_charge_id"]) == []


def test_a_refund_beyond_the_payment_is_refused_and_stores_nothing(
    client: httpx.Client,
    faults: FaultInjector,
    tenant: TenantHandle,
    db: psycopg.Connection[DictRow],
) -> None:
    payment = paid(client)
    pid = payment["payment_id"]
    assert post_refund(client, pid, refund_body(amount="7.00"), key=new_key()).status_code == 201

    key = new_key()
    refused = post_refund(client, pid, refund_body(amount="3.01"), key=key)
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "REFUND_EXCEEDS_PAYMENT"
    assert refused.headers["content-type"] == "application/problem+json"
    assert refund_operation(db, tenant, key) is None
    assert len(faults.refunds(charge_id=payment["provider_charge_id"])) == 1
    # Nothing was stored under the key: the same key carries a request that fits.
    fits = post_refund(client, pid, refund_body(amount="3.00"), key=key)
    assert fits.status_code == 201, fits.text
    # Refused again once nothing is left, but the key's own refund still replays.
    assert post_refund(client, pid, refund_body(amount="3.00"), key=key).status_code == 201
    done = post_refund(client, pid, refund_body(amount="0.01"), key=new_key())
    assert done.status_code == 409
    assert done.json()["code"] == "PAYMENT_NOT_REFUNDABLE"


def test_only_a_succeeded_payment_can_be_refunded(
    client: httpx.Client,
    faults: FaultInjector,
    tenant: TenantHandle,
    db: psycopg.Connection[DictRow],
) -> None:
    declined = client.post(
        "/payments",
        json={"amount": "5.00", "currency": "EUR", "account_id": "acc_decline_card_declined"},
        headers={"Idempotency-Key": new_key()},
    )
    assert declined.status_code == 402
    key = new_key()
    refused = post_refund(client, declined.json()["payment_id"], refund_body(), key=key)
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "PAYMENT_NOT_REFUNDABLE"
    assert refund_operation(db, tenant, key) is None


def test_another_tenants_or_an_unknown_payment_is_not_found(
    client: httpx.Client, api: Process, db: psycopg.Connection[DictRow]
) -> None:
    payment = paid(client)
    refund = post_refund(client, payment["payment_id"], refund_body(), key=new_key()).json()
    with api_client(api, make_tenant(db, "other")) as other:
        for path in [
            f"/refunds/{refund['refund_id']}",
            f"/payments/{payment['payment_id']}/refunds",
        ]:
            assert other.get(path).status_code == 404
        stranger = post_refund(other, payment["payment_id"], refund_body(), key=new_key())
        assert stranger.status_code == 404
        assert stranger.json()["code"] == "NOT_FOUND"
    for payment_id in ["not-a-uuid", "00000000-0000-0000-0000-000000000000"]:
        assert post_refund(client, payment_id, refund_body(), key=new_key()).status_code == 404
    assert client.get("/refunds/nope").status_code == 404


def test_invalid_refund_requests_are_refused_with_the_failing_field(
    client: httpx.Client, tenant: TenantHandle, db: psycopg.Connection[DictRow]
) -> None:
    pid = paid(client)["payment_id"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"amount": 4.0}, "amount"),
        ({"amount": "4.001"}, "amount"),
        ({"amount": "0"}, "amount"),
        ({"amount": "1.00", "reason": "because"}, "reason"),
        ({"amount": "1.00", "extra": 1}, "extra"),
        ({"amount": "1.00", "metadata": {"k": 1}}, "metadata.k"),
    ]
    for body, field in cases:
        key = new_key()
        answer = post_refund(client, pid, body, key=key)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["code"] == "VALIDATION_ERROR"
        assert field in {e["field"] for e in answer.json()["errors"]}, answer.json()
        assert refund_operation(db, tenant, key) is None
    assert post_refund(client, pid, refund_body(), key=None).json()["code"] == (
        "IDEMPOTENCY_KEY_MISSING"
    )


def test_a_refund_the_provider_refuses_fails_and_gives_its_amount_back(
    client: httpx.Client, faults: FaultInjector, provider: Process
) -> None:
    payment = paid(client)
    pid = payment["payment_id"]
    # Someone refunded 8.00 of the charge at the provider directly: it has 2.00 left there.
    direct = httpx.post(
        f"{provider.url}/refunds",
        json={"charge_id": payment["provider_charge_id"], "amount_minor": 800},
        headers={"Idempotency-Key": new_key(), **PROVIDER_AUTH},
    )
    assert direct.status_code == 201, direct.text
    key = new_key()
    rejected = post_refund(client, pid, refund_body(amount="5.00"), key=key)
    assert rejected.status_code == 502, rejected.text
    problem = rejected.json()
    assert problem["code"] == "PROVIDER_REJECTED"
    refund = client.get(f"/refunds/{problem['refund_id']}").json()
    assert refund["status"] == "FAILED"
    replay = post_refund(client, pid, refund_body(amount="5.00"), key=key)
    assert (replay.status_code, replay.content) == (502, rejected.content)
    after = client.get(f"/payments/{pid}").json()
    assert (after["status"], after["amount_refunded"]) == ("SUCCEEDED", "0.00")
    # A failed refund holds nothing back: the whole amount may still be asked for.
    assert post_refund(client, pid, refund_body(amount="2.00"), key=new_key()).status_code == 201


def test_a_refund_the_provider_did_not_process_is_driven_again_by_the_retry(
    client: httpx.Client, faults: FaultInjector
) -> None:
    payment = paid(client)
    faults.add("unavailable", account_id=payment["account_id"])
    key, body = new_key(), refund_body(amount="1.00")
    unavailable = post_refund(client, payment["payment_id"], body, key=key)
    assert unavailable.status_code == 503, unavailable.text
    assert unavailable.json()["code"] == "PROVIDER_UNAVAILABLE"
    assert unavailable.headers["retry-after"]
    refund_id = unavailable.json()["refund_id"]
    assert client.get(f"/refunds/{refund_id}").json()["status"] == "PENDING"
    assert faults.refunds(charge_id=payment["provider_charge_id"]) == []

    retried = post_refund(client, payment["payment_id"], body, key=key)
    assert retried.status_code == 201, retried.text
    assert retried.json()["refund_id"] == refund_id
    assert len(faults.refunds(charge_id=payment["provider_charge_id"])) == 1


def test_a_refund_key_past_its_ttl_is_expired_and_never_refunds_again(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    payment = paid(client)
    key, body = new_key(), refund_body(amount="1.00")
    first = post_refund(client, payment["payment_id"], body, key=key)
    assert first.status_code == 201, first.text
    # The outcome became known two days ago: past the session API's one-day key TTL.
    db.execute(
        "UPDATE operations SET completed_at = now() - interval '2 days' WHERE id = %s",
        (first.json()["operation_id"],),
    )
    for again in (body, refund_body(amount="2.00")):
        expired = post_refund(client, payment["payment_id"], again, key=key)
        assert expired.status_code == 422, expired.text
        assert expired.json()["code"] == "IDEMPOTENCY_KEY_EXPIRED"
        assert expired.json()["operation_id"] == first.json()["operation_id"]
        assert "new refund" in expired.json()["detail"]
    assert len(faults.refunds(charge_id=payment["provider_charge_id"])) == 1
