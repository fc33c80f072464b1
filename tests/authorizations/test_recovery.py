"""Captures and voids whose answer was lost, or that were not processed, and holds that lapse.

A lost answer is settled by a lookup under the capture's (or void's) own derived key, never
by a second send under a new one; a hold past `capture_before` is refused locally and
expired by the worker, but never under a capture still in flight.
"""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.payments import new_key
from tests.support.readers.operations import operation, transitions, wait_for_state


def _modification(db: psycopg.Connection[DictRow], operation_id: str) -> dict[str, Any]:
    row = db.execute(
        "SELECT * FROM payment_modifications WHERE operation_id = %s", (operation_id,)
    ).fetchone()
    assert row is not None
    return dict(row)


def _lapse(db: psycopg.Connection[DictRow], payment_id: str) -> None:
    """The hold's window ends now (as if the capture window had passed)."""
    db.execute(
        "UPDATE payments SET capture_before = now() - interval '1 second' WHERE id = %s",
        (payment_id,),
    )


def _events(client: httpx.Client, payment_id: str) -> list[str]:
    events = client.get("/events", params={"limit": 100}).json()["data"]
    return [e["type"] for e in events if e["data"]["payment_id"] == payment_id]


def test_a_capture_whose_answer_was_lost_is_found_by_the_worker(
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    payment = authorized(client, amount="10.00")
    faults.add("timeout_after_commit", account_id=payment["account_id"], delay_s=5)
    key = new_key()
    lost = post_capture(client, payment["payment_id"], "4.00", key=key)
    assert lost.status_code == 202, lost.text
    operation_id = lost.json()["operation_id"]
    assert operation(db, operation_id)["state"] == "UNKNOWN_REQUIRES_RECOVERY"

    spawn.worker(once=False, **FAST_WORKER)
    wait_for_state(db, operation_id, "COMPLETED", "FAILED", timeout=40)
    assert operation(db, operation_id)["state"] == "COMPLETED"
    capture = _modification(db, operation_id)
    # The operation names the payment and the capture it acts on.
    read = client.get(f"/operations/{operation_id}").json()
    assert (read["operation"], read["payment_id"], read["capture_id"]) == (
        "capture_payment",
        payment["payment_id"],
        str(capture["id"]),
    )
    assert read["refund_id"] is None
    made = faults.captures(idempotency_key=capture["provider_key"])
    assert len(made) == 1, made
    assert capture["provider_reference"] == made[0]["capture_id"]
    completions = [t for t in transitions(db, operation_id) if t["to_state"] == "COMPLETED"]
    assert "found by provider lookup" in (completions[0]["reason"] or "")
    replay = post_capture(client, payment["payment_id"], "4.00", key=key)
    assert replay.status_code == 201, replay.text
    assert replay.headers["idempotent-replayed"] == "true"
    after = client.get(f"/payments/{payment['payment_id']}").json()
    assert (after["status"], after["amount_captured"]) == ("PARTIALLY_CAPTURED", "4.00")


def test_a_void_whose_answer_was_dropped_is_settled_by_the_clients_retry(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    payment = authorized(client)
    faults.add("drop_after_commit", account_id=payment["account_id"])
    key = new_key()
    lost = post_void(client, payment["payment_id"], key=key)
    assert lost.status_code == 202, lost.text
    operation_id = lost.json()["operation_id"]
    db.execute("UPDATE operations SET next_check_at = now() WHERE id = %s", (operation_id,))
    retry = post_void(client, payment["payment_id"], key=key)
    assert retry.status_code == 201, retry.text
    void = _modification(db, operation_id)
    assert len(faults.voids(idempotency_key=void["provider_key"])) == 1
    assert client.get(f"/payments/{payment['payment_id']}").json()["status"] == "VOIDED"


def test_a_capture_not_processed_is_sent_again_under_its_key(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    payment = authorized(client)
    faults.add("unavailable", account_id=payment["account_id"])
    key = new_key()
    refused = post_capture(client, payment["payment_id"], "2.00", key=key)
    assert (refused.status_code, refused.json()["code"]) == (503, "PROVIDER_UNAVAILABLE")
    # Still in flight: another capture waits for this one.
    other = post_capture(client, payment["payment_id"], "1.00")
    assert (other.status_code, other.json()["code"]) == (409, "PAYMENT_MODIFICATION_IN_PROGRESS")
    assert other.json()["operation_id"] == refused.json()["operation_id"]
    again = post_capture(client, payment["payment_id"], "2.00", key=key)
    assert again.status_code == 201, again.text
    capture = _modification(db, refused.json()["operation_id"])
    assert len(faults.captures(idempotency_key=capture["provider_key"])) == 1


def test_a_lapsed_hold_is_refused_locally_and_expired_by_the_worker(
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    untouched = authorized(client)
    partly = authorized(client, amount="10.00")
    assert post_capture(client, partly["payment_id"], "3.00").status_code == 201
    for payment in (untouched, partly):
        _lapse(db, payment["payment_id"])
    key = new_key()
    late = post_capture(client, untouched["payment_id"], "1.00", key=key)
    assert (late.status_code, late.json()["code"]) == (409, "PAYMENT_NOT_CAPTURABLE")
    assert "lapsed" in late.json()["detail"]
    [charge] = faults.charges(reference=untouched["payment_id"])
    assert faults.captures(charge_id=charge["charge_id"]) == []

    spawn.worker(once=True).wait_exit(timeout=60)
    expired = client.get(f"/payments/{untouched['payment_id']}").json()
    assert (expired["status"], expired["amount_capturable"]) == ("EXPIRED", "0.00")
    rest = client.get(f"/payments/{partly['payment_id']}").json()
    assert (rest["status"], rest["amount_captured"]) == ("CAPTURED", "3.00")
    assert _events(client, untouched["payment_id"])[-1] == "payment.expired"
    assert _events(client, partly["payment_id"])[-1] == "payment.expired"
    void = post_void(client, untouched["payment_id"])
    assert (void.status_code, void.json()["code"]) == (409, "PAYMENT_NOT_VOIDABLE")


def test_a_hold_never_lapses_under_a_capture_in_flight(
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    payment = authorized(client, amount="10.00")
    faults.add("drop_after_commit", account_id=payment["account_id"])
    faults.add("lookup_unavailable", times=1000, account_id=payment["account_id"])
    lost = post_capture(client, payment["payment_id"], "5.00")
    assert lost.status_code == 202, lost.text
    _lapse(db, payment["payment_id"])

    spawn.worker(once=True).wait_exit(timeout=60)
    held = client.get(f"/payments/{payment['payment_id']}").json()
    assert held["status"] == "AUTHORIZED"
    assert "payment.expired" not in _events(client, payment["payment_id"])

    faults.clear()
    db.execute(
        "UPDATE operations SET next_check_at = now() WHERE id = %s",
        (lost.json()["operation_id"],),
    )
    spawn.worker(once=True).wait_exit(timeout=60)
    after = client.get(f"/payments/{payment['payment_id']}").json()
    assert (after["status"], after["amount_captured"]) == ("CAPTURED", "5.00")
    assert _events(client, payment["payment_id"])[-1] == "payment.expired"
