"""Stored provider events applied by the worker: each makes its operation be reconciled now,
through recovery's own takeover and lookup, never racing a live owner and never writing a
final operation again.

The API and worker here wait an hour between recovery checks, so what settles an unknown
operation within the test is the notification alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.provider_events.conftest import SECRET
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.provider_events import deliver, event, kept, raw, secrets_setting
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.operations import operation, transitions

SLOW_RECOVERY = {
    "PAYMENTS_BACKOFF_BASE_S": "3600",
    "PAYMENTS_BACKOFF_MAX_S": "3600",
    "PAYMENTS_RECONCILE_INTERVAL_S": "3600",
    "PAYMENTS_PROVIDER_TIMEOUT_S": "8",
    "PAYMENTS_LEASE_S": "10",
    "PAYMENTS_PROVIDER_EVENTS_INTERVAL_S": "0.1",
}


@pytest.fixture
def system(spawn: Spawner, tenant: TenantHandle) -> Iterator[tuple[Process, httpx.Client]]:
    settings = {**secrets_setting({"primary": [SECRET]}), **SLOW_RECOVERY}
    api = spawn.api(**settings)
    spawn.worker(once=False, **settings)
    with api_client(api, tenant) as client:
        yield api, client


def _url(api: Process) -> str:
    assert api.url is not None
    return api.url


def _charge_event(
    db: psycopg.Connection[DictRow], payment_id: str, **object_: Any
) -> dict[str, Any]:
    row = db.execute("SELECT provider_key FROM payments WHERE id = %s", (payment_id,)).fetchone()
    assert row is not None
    sent = event()
    sent["data"]["object"].update(idempotency_key=row["provider_key"], **object_)
    return sent


def _settled(db: psycopg.Connection[DictRow], sent: dict[str, Any], state: str) -> DictRow:
    def done() -> bool:
        rows = kept(db, "primary", sent["id"])
        return bool(rows) and rows[0]["state"] == state

    wait_until(done, timeout=30, message=f"the event {state}")
    [row] = kept(db, "primary", sent["id"])
    return row


def test_a_lost_answer_is_settled_by_the_notification(
    system: tuple[Process, httpx.Client],
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    api, client = system
    body = payment_body()
    faults.add("drop_after_commit", account_id=body["account_id"])
    lost = post_payment(client, body, key=new_key())
    assert lost.status_code == 202, lost.text
    operation_id = lost.json()["operation_id"]
    payment_id = lost.json()["payment_id"]
    assert operation(db, operation_id)["state"] == "UNKNOWN_REQUIRES_RECOVERY"

    sent = _charge_event(db, payment_id)
    assert deliver(_url(api), "primary", raw(sent), signed_with=[SECRET]).status_code == 200
    row = _settled(db, sent, "applied")
    assert str(row["operation_id"]) == operation_id
    assert operation(db, operation_id)["state"] == "COMPLETED"
    # Settled by recovery's own lookup, under the operation's key: one charge.
    completions = [t for t in transitions(db, operation_id) if t["to_state"] == "COMPLETED"]
    assert "found by provider lookup" in (completions[0]["reason"] or "")
    assert len(faults.charges(reference=payment_id)) == 1
    assert client.get(f"/payments/{payment_id}").json()["status"] == "SUCCEEDED"


def test_duplicates_and_a_second_event_settle_it_once(
    system: tuple[Process, httpx.Client],
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    api, client = system
    body = payment_body()
    faults.add("drop_after_commit", account_id=body["account_id"])
    lost = post_payment(client, body, key=new_key())
    assert lost.status_code == 202, lost.text
    payment_id = lost.json()["payment_id"]
    first, second = _charge_event(db, payment_id), _charge_event(db, payment_id)
    for sent in (first, first, second, first):
        assert deliver(_url(api), "primary", raw(sent), signed_with=[SECRET]).status_code == 200
    _settled(db, first, "applied")
    _settled(db, second, "applied")
    events = db.execute(
        "SELECT type FROM events WHERE operation_id = %s", (lost.json()["operation_id"],)
    ).fetchall()
    assert [e["type"] for e in events] == ["payment.succeeded"]
    assert len(faults.charges(reference=payment_id)) == 1


def test_an_event_for_a_final_operation_writes_nothing(
    system: tuple[Process, httpx.Client], db: psycopg.Connection[DictRow]
) -> None:
    api, client = system
    paid = post_payment(client, payment_body(), key=new_key())
    assert paid.status_code == 201, paid.text
    before = transitions(db, paid.json()["operation_id"])
    sent = _charge_event(db, paid.json()["payment_id"])
    deliver(_url(api), "primary", raw(sent), signed_with=[SECRET])
    row = _settled(db, sent, "applied")
    assert row["reason"] == "the operation is COMPLETED already"
    assert transitions(db, paid.json()["operation_id"]) == before


def test_an_event_for_an_operation_its_owner_is_sending_does_not_race_it(
    system: tuple[Process, httpx.Client],
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    api, client = system
    body = payment_body()
    faults.add("latency", account_id=body["account_id"], delay_s=3)
    key = new_key()
    with ThreadPoolExecutor(max_workers=1) as pool:
        answer = pool.submit(post_payment, client, body, key=key)
        wait_until(
            lambda: (
                db.execute(
                    "SELECT 1 FROM payments p JOIN operations o ON o.id = p.operation_id"
                    " WHERE o.idempotency_key = %s",
                    (key,),
                ).fetchone()
                is not None
            ),
            message="the payment claimed",
        )
        payment_id = db.execute(
            "SELECT p.id FROM payments p JOIN operations o ON o.id = p.operation_id"
            " WHERE o.idempotency_key = %s",
            (key,),
        ).fetchone()
        assert payment_id is not None
        sent = _charge_event(db, str(payment_id["id"]))
        deliver(_url(api), "primary", raw(sent), signed_with=[SECRET])
        parked = _settled(db, sent, "parked")
        assert "live lease" in (parked["reason"] or "")
        assert answer.result().status_code == 201
    row = _settled(db, sent, "applied")
    assert row["reason"] == "the operation is COMPLETED already"
    owners = {t["actor"] for t in transitions(db, answer.result().json()["operation_id"])}
    assert not any(actor.startswith("provider-event:") for actor in owners), owners


def test_an_event_for_no_operation_is_kept_and_one_of_no_kind_rejected(
    system: tuple[Process, httpx.Client], db: psycopg.Connection[DictRow]
) -> None:
    api, _ = system
    stranger = event()
    deliver(_url(api), "primary", raw(stranger), signed_with=[SECRET])
    parked = _settled(db, stranger, "parked")
    assert parked["reason"] == "no operation under its key yet"
    assert parked["next_attempt_at"] is not None
    dispute = event(type="dispute.created")
    deliver(_url(api), "primary", raw(dispute), signed_with=[SECRET])
    rejected = _settled(db, dispute, "rejected")
    assert "no operation kind" in (rejected["reason"] or "")
