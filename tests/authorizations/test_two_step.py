"""Two-step payments over HTTP: authorize, capture in parts, void, and what is refused.

Each test runs against the real API, its database and the fake provider, and counts what the
provider made under each derived key: a refusal sends nothing and stores nothing.
"""

from __future__ import annotations

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.refunds import paid, post_refund, refund_body
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant
from tests.support.readers.operations import operation_by_key


def _payment(client: httpx.Client, payment_id: str) -> dict[str, object]:
    response = client.get(f"/payments/{payment_id}")
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_a_manual_payment_is_authorized_and_holds_the_money(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    payment = authorized(client, amount="10.00")
    assert payment["capture"] == "manual"
    assert (payment["amount_captured"], payment["amount_capturable"]) == ("0.00", "10.00")
    assert payment["capture_before"] is not None
    held = db.execute(
        "SELECT capture_before - created_at AS window FROM payments WHERE id = %s",
        (payment["payment_id"],),
    ).fetchone()
    assert held is not None
    assert held["window"].total_seconds() == 7 * 86400
    [charge] = faults.charges(reference=payment["payment_id"])
    assert (charge["status"], charge["capture"]) == ("authorized", "manual")
    events = client.get("/events", params={"limit": 100}).json()["data"]
    mine = [e for e in events if e["data"]["payment_id"] == payment["payment_id"]]
    assert [e["type"] for e in mine] == ["payment.authorized"]


def test_a_one_step_payment_shows_it_took_all_of_it(client: httpx.Client) -> None:
    payment = paid(client, amount="10.00")
    assert (payment["capture"], payment["amount_captured"]) == ("automatic", "10.00")
    assert (payment["amount_capturable"], payment["capture_before"]) == ("0.00", None)


def test_captures_in_parts_take_the_authorization_and_no_more(
    client: httpx.Client, faults: FaultInjector
) -> None:
    payment = authorized(client, amount="10.00")
    pid = payment["payment_id"]
    first = post_capture(client, pid, "4.00")
    assert first.status_code == 201, first.text
    assert (first.json()["status"], first.json()["amount"]) == ("SUCCEEDED", "4.00")
    assert first.headers["location"] == f"/captures/{first.json()['capture_id']}"
    after = _payment(client, pid)
    assert (after["status"], after["amount_captured"], after["amount_capturable"]) == (
        "PARTIALLY_CAPTURED",
        "4.00",
        "6.00",
    )
    over = post_capture(client, pid, "6.01")
    assert over.status_code == 422, over.text
    assert (over.json()["code"], over.json()["amount_capturable"]) == (
        "CAPTURE_EXCEEDS_CAPTURABLE",
        "6.00",
    )
    rest = post_capture(client, pid)
    assert rest.status_code == 201, rest.text
    assert rest.json()["amount"] == "6.00"
    done = _payment(client, pid)
    assert (done["status"], done["amount_captured"], done["amount_capturable"]) == (
        "CAPTURED",
        "10.00",
        "0.00",
    )
    more = post_capture(client, pid, "0.01")
    assert (more.status_code, more.json()["code"]) == (409, "PAYMENT_NOT_CAPTURABLE")
    [charge] = faults.charges(reference=pid)
    captures = faults.captures(charge_id=charge["charge_id"])
    assert sorted(c["amount_minor"] for c in captures) == [400, 600]
    listed = client.get(f"/payments/{pid}/captures").json()
    assert [c["amount"] for c in listed["data"]] == ["4.00", "6.00"]
    events = client.get("/events", params={"limit": 100}).json()["data"]
    mine = [e for e in events if e["data"]["payment_id"] == pid]
    assert [e["type"] for e in mine] == [
        "payment.authorized",
        "payment.captured",
        "payment.captured",
    ]
    assert [e["data"]["amount_captured"] for e in mine] == ["0.00", "4.00", "10.00"]
    # Each capture's event carries the capture as it was made.
    assert mine[1]["data"]["capture"]["capture_id"] == first.json()["capture_id"]
    assert mine[1]["data"]["capture"]["status"] == "SUCCEEDED"
    assert mine[1]["data"]["capture"]["provider_capture_id"] is not None


def test_a_capture_replays_and_refuses_its_key_with_another_amount(
    client: httpx.Client, faults: FaultInjector
) -> None:
    payment = authorized(client)
    key = new_key()
    first = post_capture(client, payment["payment_id"], "3.00", key=key)
    assert first.status_code == 201, first.text
    again = post_capture(client, payment["payment_id"], "3.00", key=key)
    assert again.status_code == 201
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    other = post_capture(client, payment["payment_id"], "2.00", key=key)
    assert (other.status_code, other.json()["code"]) == (422, "IDEMPOTENCY_KEY_REUSED")
    # The rest is another request than "3.00", even when 3.00 would be the rest.
    rest = post_capture(client, payment["payment_id"], key=key)
    assert (rest.status_code, rest.json()["code"]) == (422, "IDEMPOTENCY_KEY_REUSED")
    assert len(faults.captures(amount_minor=300, charge_id=_charge_id(faults, payment))) == 1


def _charge_id(faults: FaultInjector, payment: dict[str, object]) -> str:
    [charge] = faults.charges(reference=payment["payment_id"])
    charge_id: str = charge["charge_id"]
    return charge_id


def test_a_void_releases_the_hold_and_nothing_is_captured_after_it(
    client: httpx.Client, faults: FaultInjector
) -> None:
    payment = authorized(client)
    pid = payment["payment_id"]
    voided = post_void(client, pid)
    assert voided.status_code == 201, voided.text
    assert (voided.json()["status"], voided.json()["amount_released"]) == ("SUCCEEDED", "10.00")
    after = _payment(client, pid)
    assert (after["status"], after["amount_capturable"]) == ("VOIDED", "0.00")
    capture = post_capture(client, pid, "1.00")
    assert (capture.status_code, capture.json()["code"]) == (409, "PAYMENT_NOT_CAPTURABLE")
    again = post_void(client, pid)
    assert (again.status_code, again.json()["code"]) == (409, "PAYMENT_NOT_VOIDABLE")
    assert faults.captures(charge_id=_charge_id(faults, payment)) == []
    assert len(faults.voids(charge_id=_charge_id(faults, payment))) == 1


def test_a_void_after_a_partial_capture_releases_the_rest(client: httpx.Client) -> None:
    payment = authorized(client, amount="10.00")
    pid = payment["payment_id"]
    assert post_capture(client, pid, "2.50").status_code == 201
    voided = post_void(client, pid)
    assert voided.status_code == 201, voided.text
    assert voided.json()["amount_released"] == "7.50"
    after = _payment(client, pid)
    assert (after["status"], after["amount_captured"], after["amount_capturable"]) == (
        "CAPTURED",
        "2.50",
        "0.00",
    )


def test_no_void_after_a_full_capture(client: httpx.Client, faults: FaultInjector) -> None:
    payment = authorized(client)
    assert post_capture(client, payment["payment_id"]).status_code == 201
    refused = post_void(client, payment["payment_id"])
    assert (refused.status_code, refused.json()["code"]) == (409, "PAYMENT_NOT_VOIDABLE")
    assert faults.voids(charge_id=_charge_id(faults, payment)) == []


def test_refunds_give_back_only_captured_money(client: httpx.Client) -> None:
    payment = authorized(client, amount="10.00")
    pid = payment["payment_id"]
    held = post_refund(client, pid, refund_body(amount="1.00"), key=new_key())
    assert (held.status_code, held.json()["code"]) == (409, "PAYMENT_NOT_REFUNDABLE")
    assert post_capture(client, pid, "4.00").status_code == 201
    assert post_void(client, pid).status_code == 201
    over = post_refund(client, pid, refund_body(amount="4.01"), key=new_key())
    assert (over.status_code, over.json()["code"]) == (422, "REFUND_EXCEEDS_PAYMENT")
    refund = post_refund(client, pid, refund_body(amount="4.00"), key=new_key())
    assert refund.status_code == 201, refund.text
    after = _payment(client, pid)
    assert (after["status"], after["amount_refunded"]) == ("REFUNDED", "4.00")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"amount": "0.00"}, "amount"),
        ({"amount": "-1.00"}, "amount"),
        ({"amount": "1.234"}, "amount"),
        ({"amount": "abc"}, "amount"),
        ({"amount": 5}, "amount"),
        ({"amount": "1.00", "final": True}, "final"),
    ],
    ids=["zero", "negative", "too-many-digits", "malformed", "number", "unknown-member"],
)
def test_a_bad_capture_is_refused_and_changes_nothing(
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
    tenant: TenantHandle,
    body: dict[str, object],
    field: str,
) -> None:
    payment = authorized(client)
    key = new_key()
    refused = post_capture(client, payment["payment_id"], key=key, body=body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "VALIDATION_ERROR"
    assert field in refused.text
    assert operation_by_key(db, tenant, key) is None
    assert faults.captures(charge_id=_charge_id(faults, payment)) == []
    assert _payment(client, payment["payment_id"])["status"] == "AUTHORIZED"


def test_a_void_with_a_body_is_refused(client: httpx.Client, faults: FaultInjector) -> None:
    payment = authorized(client)
    refused = post_void(client, payment["payment_id"], body={"amount": "1.00"})
    assert (refused.status_code, refused.json()["code"]) == (422, "VALIDATION_ERROR")
    assert faults.voids(charge_id=_charge_id(faults, payment)) == []


def test_only_an_authorization_is_captured_or_voided(
    client: httpx.Client,
    api: Process,
    db: psycopg.Connection[DictRow],
    faults: FaultInjector,
) -> None:
    one_step = paid(client)
    declined = post_payment(
        client,
        payment_body(capture="manual", account_id="acc_decline_insufficient_funds"),
        key=new_key(),
    )
    assert declined.status_code == 402, declined.text
    for pid in (one_step["payment_id"], declined.json()["payment_id"]):
        capture = post_capture(client, pid, "1.00")
        assert (capture.status_code, capture.json()["code"]) == (409, "PAYMENT_NOT_CAPTURABLE")
        void = post_void(client, pid)
        assert (void.status_code, void.json()["code"]) == (409, "PAYMENT_NOT_VOIDABLE")
    with api_client(api, make_tenant(db, "another tenant")) as other:
        theirs = authorized(other)
    for response in (
        post_capture(client, theirs["payment_id"], "1.00"),
        post_void(client, theirs["payment_id"]),
        post_capture(client, "not-a-uuid", "1.00"),
    ):
        assert response.status_code == 404, response.text
    assert faults.captures(charge_id=_charge_id(faults, theirs)) == []


def test_an_unknown_capture_mode_is_refused(client: httpx.Client) -> None:
    refused = post_payment(client, payment_body(capture="later"), key=new_key())
    assert (refused.status_code, refused.json()["code"]) == (422, "VALIDATION_ERROR")
    assert "capture" in refused.text


def test_manual_is_another_request_than_automatic_under_one_key(client: httpx.Client) -> None:
    key, body = new_key(), payment_body()
    assert post_payment(client, body, key=key).status_code == 201
    again = post_payment(client, {**body, "capture": "automatic"}, key=key)
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    manual = post_payment(client, {**body, "capture": "manual"}, key=key)
    assert (manual.status_code, manual.json()["code"]) == (422, "IDEMPOTENCY_KEY_REUSED")
