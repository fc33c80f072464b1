"""A command over the broker is the HTTP request's twin: one key, one payment, one charge.

Each test sends commands to a real `payments consume` on a queue of its own, and counts the
fake provider's charges under the payment's derived key.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.broker.amqp import Amqp, Received
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import TenantHandle
from tests.support.readers.operations import operation_by_key, payment_for, refund_for

Db = psycopg.Connection[DictRow]


def command_headers(tenant: TenantHandle, key: str, **extra: str) -> dict[str, Any]:
    return {"authorization": f"Bearer {tenant.api_key}", "idempotency-key": key, **extra}


def charges_for(db: Db, provider: Process, tenant: TenantHandle, key: str) -> list[Any]:
    """The provider's charges under the derived key of the tenant's payment with `key`."""
    op = operation_by_key(db, tenant, key)
    assert op is not None, f"no operation holds {key}"
    assert provider.url is not None
    return FaultInjector(provider.url).charges(
        idempotency_key=payment_for(db, op["id"])["provider_key"]
    )


def test_a_command_published_three_times_is_one_charge(
    amqp: Amqp, tenant: TenantHandle, db: Db, provider: Process
) -> None:
    key, body = new_key(), payment_body()
    # At once: the duplicates are answered side by side, each waiting for the first's outcome
    # (`prefer: wait`, as over HTTP) and then replaying it.
    sent = [
        amqp.send(body, headers=command_headers(tenant, key, prefer="wait=10")) for _ in range(3)
    ]
    replies = amqp.replies(3)

    assert sorted(r.correlation_id or "" for r in replies) == sorted(sent)
    assert [r.status for r in replies] == [201, 201, 201]
    assert len({r.body for r in replies}) == 1, "every reply is the one stored answer"
    assert sorted(r.headers.get("idempotent-replayed", "") for r in replies) == ["", "true", "true"]
    payment = replies[0].json()
    assert payment["status"] == "SUCCEEDED"
    assert replies[0].headers["location"] == f"/payments/{payment['payment_id']}"
    assert replies[0].content_type == "application/json"
    # The command's type rides in a header: a reply is no command.
    assert replies[0].headers["command"] == "create_payment"
    assert replies[0].type is None
    assert len(charges_for(db, provider, tenant, key)) == 1


def test_a_resent_command_replays_the_stored_answer(
    amqp: Amqp, tenant: TenantHandle, db: Db, provider: Process
) -> None:
    key, body = new_key(), payment_body()
    first = _answer(amqp, body, command_headers(tenant, key))
    again = [_answer(amqp, body, command_headers(tenant, key)) for _ in range(2)]

    assert first.status == 201
    assert "idempotent-replayed" not in first.headers
    for replay in again:
        assert (replay.status, replay.body) == (201, first.body)
        assert replay.headers["idempotent-replayed"] == "true"
    assert len(charges_for(db, provider, tenant, key)) == 1


def test_http_then_broker_with_one_key_is_one_payment(
    amqp: Amqp,
    client: httpx.Client,
    tenant: TenantHandle,
    db: Db,
    provider: Process,
) -> None:
    key, body = new_key(), payment_body()
    over_http = client.post("/payments", json=body, headers={"Idempotency-Key": key})
    assert over_http.status_code == 201

    # The key in its structured-field form names the same key, as over HTTP.
    reply = _answer(amqp, body, command_headers(tenant, f'"{key}"'))

    assert reply.status == 201
    assert reply.body == over_http.content
    assert reply.headers["idempotent-replayed"] == "true"
    assert len(charges_for(db, provider, tenant, key)) == 1


def test_broker_then_http_with_one_key_is_one_payment(
    amqp: Amqp,
    client: httpx.Client,
    tenant: TenantHandle,
    db: Db,
    provider: Process,
) -> None:
    key, body = new_key(), payment_body()
    reply = _answer(amqp, body, command_headers(tenant, key))
    over_http = client.post("/payments", json=body, headers={"Idempotency-Key": key})

    assert reply.status == 201
    assert over_http.status_code == 201
    assert over_http.headers["idempotent-replayed"] == "true"
    assert over_http.content == reply.body
    assert len(charges_for(db, provider, tenant, key)) == 1


def test_a_key_reused_with_another_amount_is_answered_422_and_changes_nothing(
    amqp: Amqp,
    client: httpx.Client,
    tenant: TenantHandle,
    db: Db,
    provider: Process,
) -> None:
    key, body = new_key(), payment_body()
    first = _answer(amqp, body, command_headers(tenant, key))
    reused = _answer(amqp, {**body, "amount": "11.00"}, command_headers(tenant, key))
    # The same refusal as over HTTP, whichever way the key came first.
    over_http = client.post(
        "/payments", json={**body, "amount": "11.00"}, headers={"Idempotency-Key": key}
    )

    assert first.status == 201
    assert reused.status == 422
    assert reused.content_type == "application/problem+json"
    problem = reused.json()
    assert problem["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert problem["operation_id"] == first.json()["operation_id"]
    assert over_http.status_code == 422
    assert over_http.json()["code"] == problem["code"]
    assert len(charges_for(db, provider, tenant, key)) == 1
    # Answered, so acked: nothing is left in the queue, nothing dead-lettered.
    assert amqp.waiting() == 0


def test_an_invalid_body_is_answered_as_over_http_and_stores_nothing(
    amqp: Amqp, client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    key = new_key()
    body = payment_body(amount="10.001", metadata={"a": 1})
    correlation_id = amqp.send(body, headers=command_headers(tenant, key), message_id="req-42")
    reply = amqp.reply()
    over_http = client.post("/payments", json=body, headers={"Idempotency-Key": key})

    assert reply.status == 422
    assert over_http.status_code == 422
    problem, expected = reply.json(), over_http.json()
    assert problem["code"] == "VALIDATION_ERROR"
    assert problem["errors"] == expected["errors"]
    # The command's message id is its request id, as X-Request-Id is over HTTP.
    assert reply.correlation_id == correlation_id
    assert problem["request_id"] == "req-42"
    assert operation_by_key(db, tenant, key) is None


def test_a_refund_command_refunds_once(
    amqp: Amqp,
    client: httpx.Client,
    tenant: TenantHandle,
    db: Db,
    provider: Process,
) -> None:
    paid = client.post("/payments", json=payment_body(), headers={"Idempotency-Key": new_key()})
    assert paid.status_code == 201
    payment_id = paid.json()["payment_id"]
    key, body = new_key(), {"amount": "4.00", "reason": "requested_by_customer"}
    headers = command_headers(tenant, key, **{"payment-id": payment_id})

    first = _answer(amqp, body, headers, type="create_refund")
    again = _answer(amqp, body, headers, type="create_refund")
    over_http = client.post(
        f"/payments/{payment_id}/refunds", json=body, headers={"Idempotency-Key": key}
    )

    assert first.status == 201
    refund = first.json()
    assert (refund["status"], refund["amount"], refund["payment_id"]) == (
        "SUCCEEDED",
        "4.00",
        payment_id,
    )
    assert (again.status, again.body) == (201, first.body)
    assert over_http.content == first.body
    provider_key = refund_for(db, refund["operation_id"])["provider_key"]
    assert provider.url is not None
    assert len(FaultInjector(provider.url).refunds(idempotency_key=provider_key)) == 1
    assert client.get(f"/payments/{payment_id}").json()["amount_refunded"] == "4.00"


def test_a_refund_of_another_tenants_payment_is_answered_404(
    amqp: Amqp, client: httpx.Client, db: Db
) -> None:
    from tests.support.factories.tenants import make_tenant

    paid = client.post("/payments", json=payment_body(), headers={"Idempotency-Key": new_key()})
    other = make_tenant(db, "another tenant")
    headers = command_headers(other, new_key(), **{"payment-id": paid.json()["payment_id"]})

    reply = _answer(amqp, {"amount": "1.00"}, headers, type="create_refund")

    assert reply.status == 404
    assert reply.json()["code"] == "NOT_FOUND"


def _answer(
    amqp: Amqp, body: dict[str, Any], headers: dict[str, Any], *, type: str = "create_payment"
) -> Received:
    """Send one command and wait for its reply."""
    correlation_id = amqp.send(body, type=type, headers=headers)
    reply = amqp.reply()
    assert reply.correlation_id == correlation_id, json.dumps(reply.headers, default=str)
    return reply
