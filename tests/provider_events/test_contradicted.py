"""A signed notification that contradicts a final outcome we hold is a discrepancy in
settlement's queue, never an overwrite: the event is kept `contradicted`, the operation and
its business object are left as they are, and one item per difference is opened (a duplicate,
or a second event saying the same, adds none). An event that agrees is applied, as before.

Each event carries the provider's own record (read from the fake provider's ledger), changed
where the test has the provider say something else. The API and worker wait an hour between
recovery checks, so nothing but the notification moves anything here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.provider_events.conftest import SECRET
from tests.provider_events.test_apply import SLOW_RECOVERY
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.authorizations import authorized, post_capture
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.provider_events import deliver, event, kept, raw, secrets_setting
from tests.support.factories.refunds import post_refund, refund_body
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.operations import operation, transitions

Db = psycopg.Connection[DictRow]


@pytest.fixture
def system(spawn: Spawner, tenant: TenantHandle) -> Iterator[tuple[str, httpx.Client]]:
    settings = {**secrets_setting({"primary": [SECRET]}), **SLOW_RECOVERY}
    api: Process = spawn.api(**settings)
    spawn.worker(once=False, **settings)
    assert api.url is not None
    with api_client(api, tenant) as client:
        yield api.url, client


def _notification(kind: str, record: dict[str, Any], **said: Any) -> dict[str, Any]:
    """A `kind` event carrying the provider's `record`, with `said` changed in it."""
    sent = event(type=kind)
    sent["data"]["object"] = {**record, **said}
    return sent


def _settled(db: Db, sent: dict[str, Any], state: str) -> DictRow:
    def done() -> bool:
        rows = kept(db, "primary", sent["id"])
        return bool(rows) and rows[0]["state"] == state

    wait_until(done, timeout=30, message=f"the event {state}")
    [row] = kept(db, "primary", sent["id"])
    return row


def _items(db: Db, provider_key: str) -> list[DictRow]:
    return db.execute(
        "SELECT * FROM reconciliation_items WHERE provider = 'primary' AND provider_key = %s",
        (provider_key,),
    ).fetchall()


def _written(db: Db, operation_id: str) -> tuple[Any, ...]:
    """What the operation and its outcome's writes hold: its row's state and fence, its
    transitions, its events."""
    row = operation(db, operation_id)
    events = db.execute(
        "SELECT type FROM events WHERE operation_id = %s ORDER BY id", (operation_id,)
    ).fetchall()
    return row["state"], row["fence"], transitions(db, operation_id), events


def test_a_decline_of_a_payment_we_hold_succeeded_is_queued_once_and_changes_nothing(
    system: tuple[str, httpx.Client],
    faults: FaultInjector,
    db: Db,
    admin_client: httpx.Client,
) -> None:
    url, client = system
    paid = post_payment(client, payment_body(), key=new_key())
    assert paid.status_code == 201, paid.text
    payment_id, operation_id = paid.json()["payment_id"], paid.json()["operation_id"]
    [charge] = faults.charges(reference=payment_id)
    before = _written(db, operation_id)
    # The run's own open item of the key (agreed, not settled yet) is not the event's to close.
    db.execute(
        "INSERT INTO reconciliation_items (id, day, record_type, provider, provider_key, kind,"
        " state, detail) VALUES (gen_random_uuid(), current_date, 'charge', 'primary', %s,"
        " 'expected', 'open', 'agreed; the provider has not settled it yet')",
        (charge["idempotency_key"],),
    )

    sent = _notification(
        "charge.declined", charge, status="declined", decline_code="insufficient_funds"
    )
    # Delivered twice: kept once, one item.
    for _ in range(2):
        assert deliver(url, "primary", raw(sent), signed_with=[SECRET]).status_code == 200
    row = _settled(db, sent, "contradicted")
    assert str(row["operation_id"]) == operation_id
    assert row["applied_at"] is None
    assert "status_mismatch" in row["reason"]
    assert "as succeeded, the provider as declined" in row["reason"]

    expected, item = sorted(_items(db, charge["idempotency_key"]), key=lambda i: i["kind"])
    assert (expected["kind"], expected["state"]) == ("expected", "open")
    assert (item["record_type"], item["kind"], item["state"]) == (
        "charge",
        "status_mismatch",
        "open",
    )
    assert str(item["operation_id"]) == operation_id
    assert str(item["payment_id"]) == payment_id
    assert item["detail"].startswith(f"provider event {sent['id']} (charge.declined): ")
    assert item["ours"]["status"] == "SUCCEEDED"
    assert item["theirs"]["status"] == "declined"
    assert item["theirs"]["source"] == "provider_event"
    assert item["theirs"]["provider_event"]["event_id"] == sent["id"]
    [opened] = db.execute(
        "SELECT from_state, to_state, actor FROM reconciliation_item_changes WHERE item_id = %s",
        (item["id"],),
    ).fetchall()
    assert opened["from_state"] is None
    assert opened["to_state"] == "open"
    assert opened["actor"].startswith("provider-event:")

    # A second event saying the same: contradicted too, still one item.
    again = _notification("charge.declined", charge, status="declined")
    deliver(url, "primary", raw(again), signed_with=[SECRET])
    _settled(db, again, "contradicted")
    assert len(_items(db, charge["idempotency_key"])) == 2

    # Neither the operation nor the payment was written.
    assert _written(db, operation_id) == before
    shown = client.get(f"/payments/{payment_id}").json()
    assert shown["status"] == "SUCCEEDED"
    assert shown["decline_code"] is None

    # Operators work it as any item of the queue.
    read = admin_client.get(f"/admin/discrepancies/{item['id']}")
    assert read.status_code == 200, read.text
    assert "status" in read.json()["differing_fields"]
    resolved = admin_client.post(
        f"/admin/discrepancies/{item['id']}/resolve",
        json={"reason": "the provider confirmed the charge succeeded"},
    )
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["state"] == "resolved"
    assert _written(db, operation_id) == before


def test_a_charge_made_of_a_payment_we_hold_declined_is_queued(
    system: tuple[str, httpx.Client], faults: FaultInjector, db: Db
) -> None:
    url, client = system
    body = payment_body()
    faults.add("decline", account_id=body["account_id"], decline_code="card_declined")
    declined = post_payment(client, body, key=new_key())
    assert declined.status_code == 402, declined.text
    payment_id = declined.json()["payment_id"]
    [charge] = faults.charges(reference=payment_id)
    assert charge["status"] == "declined"

    sent = _notification("charge.succeeded", charge, status="succeeded", decline_code=None)
    deliver(url, "primary", raw(sent), signed_with=[SECRET])
    row = _settled(db, sent, "contradicted")
    assert "as declined, the provider as succeeded" in row["reason"]
    [item] = _items(db, charge["idempotency_key"])
    assert (item["kind"], item["ours"]["status"]) == ("status_mismatch", "DECLINED")
    assert client.get(f"/payments/{payment_id}").json()["status"] == "DECLINED"


def test_an_event_that_agrees_is_applied_and_queues_nothing(
    system: tuple[str, httpx.Client], faults: FaultInjector, db: Db
) -> None:
    url, client = system
    paid = post_payment(client, payment_body(), key=new_key())
    assert paid.status_code == 201, paid.text
    [charge] = faults.charges(reference=paid.json()["payment_id"])
    sent = _notification("charge.succeeded", charge)
    deliver(url, "primary", raw(sent), signed_with=[SECRET])
    row = _settled(db, sent, "applied")
    assert row["reason"] == "the operation is COMPLETED already"
    assert _items(db, charge["idempotency_key"]) == []


def test_an_authorization_captured_since_its_event_was_made_agrees(
    system: tuple[str, httpx.Client], faults: FaultInjector, db: Db
) -> None:
    url, client = system
    payment = authorized(client)
    assert post_capture(client, payment["payment_id"]).status_code == 201
    [charge] = faults.charges(reference=payment["payment_id"])
    assert charge["amount_captured_minor"] == 1000
    # The event as the provider made it when it authorized: nothing captured yet. What the
    # record came to since is not the event's to contradict.
    sent = _notification("charge.authorized", charge, amount_captured_minor=0)
    deliver(url, "primary", raw(sent), signed_with=[SECRET])
    assert _settled(db, sent, "applied")["reason"] == "the operation is COMPLETED already"
    assert _items(db, charge["idempotency_key"]) == []


def test_a_refund_of_another_amount_is_queued_and_the_refund_left_alone(
    system: tuple[str, httpx.Client], faults: FaultInjector, db: Db
) -> None:
    url, client = system
    paid = post_payment(client, payment_body(), key=new_key())
    assert paid.status_code == 201, paid.text
    payment_id = paid.json()["payment_id"]
    refunded = post_refund(client, payment_id, refund_body(amount="4.00"), key=new_key())
    assert refunded.status_code == 201, refunded.text
    refund = refunded.json()
    [record] = faults.refunds(idempotency_key=f"refund-{refund['refund_id']}")
    assert record["amount_minor"] == 400
    before = _written(db, refund["operation_id"])

    sent = _notification("refund.succeeded", record, amount_minor=500)
    deliver(url, "primary", raw(sent), signed_with=[SECRET])
    row = _settled(db, sent, "contradicted")
    assert "amount_mismatch" in row["reason"]
    [item] = _items(db, record["idempotency_key"])
    assert (item["record_type"], item["kind"]) == ("refund", "amount_mismatch")
    # The provider's refunds carry no currency: only the amounts are said.
    assert item["detail"].endswith("we recorded 400 EUR, the provider 500")
    assert str(item["refund_id"]) == refund["refund_id"]
    assert _written(db, refund["operation_id"]) == before
    assert client.get(f"/refunds/{refund['refund_id']}").json()["amount"] == "4.00"


def test_a_capture_of_another_amount_is_queued_and_an_agreeing_one_applied(
    system: tuple[str, httpx.Client], faults: FaultInjector, db: Db
) -> None:
    url, client = system
    payment = authorized(client)
    captured = post_capture(client, payment["payment_id"], "6.00")
    assert captured.status_code == 201, captured.text
    capture = captured.json()
    [record] = faults.captures(idempotency_key=f"capture-{capture['capture_id']}")
    before = _written(db, capture["operation_id"])

    agreeing = _notification("capture.succeeded", record)
    deliver(url, "primary", raw(agreeing), signed_with=[SECRET])
    assert _settled(db, agreeing, "applied")["reason"] == "the operation is COMPLETED already"
    assert _items(db, record["idempotency_key"]) == []

    sent = _notification("capture.succeeded", record, amount_minor=1000)
    deliver(url, "primary", raw(sent), signed_with=[SECRET])
    _settled(db, sent, "contradicted")
    [item] = _items(db, record["idempotency_key"])
    assert (item["record_type"], item["kind"]) == ("capture", "amount_mismatch")
    assert _written(db, capture["operation_id"]) == before
    assert client.get(f"/payments/{payment['payment_id']}").json()["amount_captured"] == "6.00"
