"""What is no command is dead-lettered with its reason, once, and the consumer carries on.

Each bad message is answered on its reply queue with the problem HTTP would answer, and lands
in the queue's dead-letter queue with `x-payments-reject-reason`, without the tenant's API
key; it is not requeued, nothing is stored, and the consumer answers the next command.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

from app.broker.dead_letters import DETAIL_HEADER, REASON_HEADER
from app.tenants.keys import generate_api_key
from tests.broker.amqp import Amqp
from tests.broker.conftest import MAX_BODY_BYTES, Rig
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import TenantHandle

Db = psycopg.Connection[DictRow]


def _headers(tenant: TenantHandle, key: str) -> dict[str, Any]:
    return {"authorization": f"Bearer {tenant.api_key}", "idempotency-key": key}


# (case, reason, status, problem code): how each message below is refused.
CASES = [
    ("malformed JSON", "malformed_json", 422, "VALIDATION_ERROR"),
    ("JSON that is not an object", "malformed_json", 422, "VALIDATION_ERROR"),
    ("a duplicate member", "malformed_json", 422, "VALIDATION_ERROR"),
    ("an unknown command type", "unknown_command", 400, "UNKNOWN_COMMAND"),
    ("no command type", "unknown_command", 400, "UNKNOWN_COMMAND"),
    ("a body over the limit", "payload_too_large", 413, "PAYLOAD_TOO_LARGE"),
    ("no idempotency key", "idempotency_key_missing", 400, "IDEMPOTENCY_KEY_MISSING"),
    ("a malformed idempotency key", "idempotency_key_invalid", 400, "IDEMPOTENCY_KEY_INVALID"),
    ("an unknown tenant", "unauthenticated", 401, "UNAUTHENTICATED"),
    ("no credentials", "unauthenticated", 401, "UNAUTHENTICATED"),
    ("a refund naming no payment", "malformed_command", 400, "MALFORMED_COMMAND"),
]


def _message(case: str, tenant: TenantHandle, key: str) -> dict[str, Any]:
    """`Amqp.send`'s arguments for the bad message `case`."""
    good: dict[str, Any] = {"body": payment_body(), "headers": _headers(tenant, key)}
    if case == "malformed JSON":
        return {**good, "body": b'{"amount": "10.00", '}
    if case == "JSON that is not an object":
        return {**good, "body": b'["10.00", "EUR"]'}
    if case == "a duplicate member":
        return {**good, "body": b'{"amount": "10.00", "amount": "1.00"}'}
    if case == "an unknown command type":
        return {**good, "type": "create_widget"}
    if case == "no command type":
        return {**good, "type": None}
    if case == "a body over the limit":
        return {**good, "body": payment_body(description="x" * MAX_BODY_BYTES)}
    if case == "no idempotency key":
        return {**good, "headers": {"authorization": f"Bearer {tenant.api_key}"}}
    if case == "a malformed idempotency key":
        return {**good, "headers": {**_headers(tenant, key), "idempotency-key": "a key"}}
    if case == "an unknown tenant":
        return {**good, "headers": {**_headers(tenant, key), "authorization": unknown_key()}}
    if case == "no credentials":
        return {**good, "headers": {"idempotency-key": key}}
    assert case == "a refund naming no payment"
    return {**good, "body": {"amount": "1.00"}, "type": "create_refund"}


def unknown_key() -> str:
    """A key of the right shape that no tenant holds."""
    return f"Bearer {generate_api_key()}"


@pytest.mark.parametrize(("case", "reason", "status", "code"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_message_is_dead_lettered_with_its_reason(
    served: Rig,
    amqp: Amqp,
    tenant: TenantHandle,
    db: Db,
    case: str,
    reason: str,
    status: int,
    code: str,
) -> None:
    key = new_key()
    correlation_id = amqp.send(**_message(case, tenant, key))

    reply = amqp.reply()
    letter = amqp.dead_letter()

    assert reply.correlation_id == correlation_id
    assert reply.status == status
    assert reply.content_type == "application/problem+json"
    assert reply.json()["code"] == code
    assert letter.correlation_id == correlation_id
    assert letter.headers[REASON_HEADER] == reason
    assert letter.headers[DETAIL_HEADER] == reply.json()["detail"]
    # The tenant's credentials are not kept where operators read dead letters.
    assert "authorization" not in letter.headers
    # Dead-lettered once, by the consumer: never requeued, never dead-lettered by the queue.
    assert "x-death" not in letter.headers
    assert amqp.waiting() == 0
    assert (
        db.execute("SELECT 1 FROM operations WHERE idempotency_key = %s", (key,)).fetchone() is None
    )
    assert all(process.alive() for process in served.consumers.started)


def test_the_consumer_answers_commands_after_bad_ones(amqp: Amqp, tenant: TenantHandle) -> None:
    amqp.send(b"\xff\xfe not even text", headers=_headers(tenant, new_key()))
    amqp.send(payment_body(), headers=_headers(tenant, new_key()), type="refund_everything")
    good = amqp.send(payment_body(), headers=_headers(tenant, new_key()))

    replies = {reply.correlation_id: reply for reply in amqp.replies(3)}

    assert replies[good].status == 201
    assert [amqp.dead_letter().headers[REASON_HEADER] for _ in range(2)] == [
        "malformed_json",
        "unknown_command",
    ]


def test_a_bad_message_without_a_reply_queue_is_still_dead_lettered(
    amqp: Amqp, tenant: TenantHandle
) -> None:
    amqp.send(b"{", headers=_headers(tenant, new_key()), reply=False)

    assert amqp.dead_letter().headers[REASON_HEADER] == "malformed_json"
