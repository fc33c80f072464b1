"""Captures and voids over the broker: the HTTP routes' twins, one key, one provider call.

Each test authorizes a manual payment over HTTP, then sends `capture_payment` or
`void_payment` commands (the payment in the `payment-id` header, as the path names it) to a
real `payments consume`, and counts what the fake provider made for the payment's charge.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.broker.amqp import Amqp, Received
from tests.broker.commands.test_exactly_once import command_headers
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.payments import new_key
from tests.support.factories.tenants import TenantHandle


def _charge_id(faults: FaultInjector, payment_id: str) -> str:
    [charge] = faults.charges(reference=payment_id)
    charge_id: str = charge["charge_id"]
    return charge_id


def _faults(provider: Process) -> FaultInjector:
    assert provider.url is not None
    return FaultInjector(provider.url)


def _headers(tenant: TenantHandle, key: str, payment_id: str, **extra: str) -> dict[str, Any]:
    return command_headers(tenant, key, **{"payment-id": payment_id}, **extra)


def _answers(
    amqp: Amqp, body: dict[str, Any], headers: dict[str, Any], *, type: str, times: int
) -> list[Received]:
    sent = [amqp.send(body, type=type, headers=headers) for _ in range(times)]
    replies = amqp.replies(times)
    assert sorted(r.correlation_id or "" for r in replies) == sorted(sent)
    return replies


def test_a_capture_published_three_times_is_one_capture(
    amqp: Amqp, client: httpx.Client, tenant: TenantHandle, provider: Process
) -> None:
    payment = authorized(client, amount="10.00")
    pid = payment["payment_id"]
    headers = _headers(tenant, new_key(), pid, prefer="wait=10")

    replies = _answers(amqp, {"amount": "4.00"}, headers, type="capture_payment", times=3)

    assert [r.status for r in replies] == [201, 201, 201]
    assert len({r.body for r in replies}) == 1, "every reply is the one stored answer"
    assert sorted(r.headers.get("idempotent-replayed", "") for r in replies) == ["", "true", "true"]
    capture = replies[0].json()
    assert (capture["status"], capture["amount"], capture["payment_id"]) == (
        "SUCCEEDED",
        "4.00",
        pid,
    )
    assert replies[0].headers["location"] == f"/captures/{capture['capture_id']}"
    assert replies[0].headers["command"] == "capture_payment"
    faults = _faults(provider)
    assert len(faults.captures(charge_id=_charge_id(faults, pid))) == 1
    assert client.get(f"/payments/{pid}").json()["amount_captured"] == "4.00"


def test_a_capture_over_the_capturable_amount_is_answered_422_and_sends_nothing(
    amqp: Amqp, client: httpx.Client, tenant: TenantHandle, provider: Process
) -> None:
    payment = authorized(client, amount="10.00")
    pid = payment["payment_id"]

    [reply] = _answers(
        amqp, {"amount": "10.01"}, _headers(tenant, new_key(), pid), type="capture_payment", times=1
    )
    over_http = post_capture(client, pid, "10.01")

    assert reply.status == 422
    assert reply.content_type == "application/problem+json"
    assert reply.json()["code"] == "CAPTURE_EXCEEDS_CAPTURABLE"
    assert reply.json()["amount_capturable"] == "10.00"
    assert over_http.status_code == 422
    assert over_http.json()["code"] == reply.json()["code"]
    faults = _faults(provider)
    assert faults.captures(charge_id=_charge_id(faults, pid)) == []
    # Answered, so acked: nothing left in the queue.
    assert amqp.waiting() == 0


def test_http_then_broker_with_one_key_is_one_capture(
    amqp: Amqp, client: httpx.Client, tenant: TenantHandle, provider: Process
) -> None:
    payment = authorized(client, amount="10.00")
    pid, key = payment["payment_id"], new_key()
    over_http = post_capture(client, pid, "3.00", key=key)
    assert over_http.status_code == 201, over_http.text

    [reply] = _answers(
        amqp, {"amount": "3.00"}, _headers(tenant, key, pid), type="capture_payment", times=1
    )
    # Another amount under the same key is the key reused, whichever way it comes.
    [reused] = _answers(
        amqp, {"amount": "2.00"}, _headers(tenant, key, pid), type="capture_payment", times=1
    )

    assert reply.status == 201
    assert reply.body == over_http.content
    assert reply.headers["idempotent-replayed"] == "true"
    assert (reused.status, reused.json()["code"]) == (422, "IDEMPOTENCY_KEY_REUSED")
    faults = _faults(provider)
    assert len(faults.captures(charge_id=_charge_id(faults, pid))) == 1


def test_an_invalid_capture_is_refused_as_over_http(
    amqp: Amqp, client: httpx.Client, tenant: TenantHandle
) -> None:
    pid = authorized(client, amount="10.00")["payment_id"]
    for body in ({"amount": "0"}, {"amount": 4}, {"amount": "1.00", "extra": 1}):
        [reply] = _answers(
            amqp, body, _headers(tenant, new_key(), pid), type="capture_payment", times=1
        )
        over_http = post_capture(client, pid, body=body)
        assert (reply.status, over_http.status_code) == (422, 422), body
        assert reply.json()["errors"] == over_http.json()["errors"], body
    [unknown] = _answers(
        amqp, {}, _headers(tenant, new_key(), "not-a-uuid"), type="capture_payment", times=1
    )
    assert (unknown.status, unknown.json()["code"]) == (404, "NOT_FOUND")


def test_a_void_published_twice_is_one_void_and_then_nothing_is_capturable(
    amqp: Amqp, client: httpx.Client, tenant: TenantHandle, provider: Process
) -> None:
    pid = authorized(client, amount="10.00")["payment_id"]
    key = new_key()

    replies = _answers(
        amqp, {}, _headers(tenant, key, pid, prefer="wait=10"), type="void_payment", times=2
    )
    over_http = post_void(client, pid, key=key)
    capture = post_capture(client, pid, "1.00")

    assert [r.status for r in replies] == [201, 201]
    assert len({r.body for r in replies}) == 1
    void = replies[0].json()
    assert (void["status"], void["amount_released"]) == ("SUCCEEDED", "10.00")
    assert replies[0].headers["command"] == "void_payment"
    assert over_http.content == replies[0].body
    assert capture.status_code == 409
    faults = _faults(provider)
    assert len(faults.voids(charge_id=_charge_id(faults, pid))) == 1


def test_a_void_without_a_payment_id_is_dead_lettered(amqp: Amqp, tenant: TenantHandle) -> None:
    amqp.send({}, type="void_payment", headers=command_headers(tenant, new_key()))
    reply = amqp.reply()
    dead = amqp.dead_letter()

    assert (reply.status, reply.json()["code"]) == (400, "MALFORMED_COMMAND")
    assert dead.headers["x-payments-reject-reason"] == "malformed_command"
    assert "authorization" not in dead.headers
