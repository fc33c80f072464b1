"""Many refunds of one payment at once, under different keys: never beyond its amount.

Each refund claim takes the payment's row lock, sums what is held, and claims in one
transaction; these tests send more refunds than fit, all at once, through one API and
through two API processes, and count what the provider refunded.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key
from tests.support.factories.refunds import paid, post_refund, refund_body, refund_in_background
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.operations import refund_operation

REFUNDS = 24  # of 1.00 each, against a 10.00 payment


def _refund_all(
    clients: list[httpx.Client], payment_id: str, *, amount: str = "1.00"
) -> list[httpx.Response]:
    with ThreadPoolExecutor(max_workers=REFUNDS) as pool:
        futures = [
            pool.submit(
                post_refund,
                clients[i % len(clients)],
                payment_id,
                refund_body(amount=amount),
                key=new_key(),
            )
            for i in range(REFUNDS)
        ]
        return [f.result(timeout=120) for f in futures]


def _assert_never_beyond(
    answers: list[httpx.Response],
    payment: dict[str, object],
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    made = [a for a in answers if a.status_code == 201]
    refused = [a for a in answers if a.status_code != 201]
    assert len(made) == 10, [a.text for a in answers]
    # A refusal says why in the payment's terms at that moment: too much while refunds are
    # held (422), or nothing left once all ten have succeeded and the payment is REFUNDED
    # (409): which one depends on when the request took the payment's lock.
    assert {(a.status_code, a.json()["code"]) for a in refused} <= {
        (422, "REFUND_EXCEEDS_PAYMENT"),
        (409, "PAYMENT_NOT_REFUNDABLE"),
    }, [a.text for a in refused]
    ledger = faults.refunds(charge_id=payment["provider_charge_id"])
    assert len(ledger) == 10
    assert sum(r["amount_minor"] for r in ledger) == 1000
    after = client.get(f"/payments/{payment['payment_id']}").json()
    assert (after["status"], after["amount_refunded"]) == ("REFUNDED", "10.00")
    # The refused requests left nothing behind: one operation per refund made, and no
    # refund operation without its refund (a claim writes both or neither).
    count = db.execute(
        "SELECT count(*) AS n FROM operations o JOIN refunds r ON r.operation_id = o.id"
        " WHERE o.operation_name = 'create_refund' AND r.payment_id = %s",
        (payment["payment_id"],),
    ).fetchone()
    assert count == {"n": 10}
    bare = db.execute(
        "SELECT count(*) AS n FROM operations o WHERE o.operation_name = 'create_refund'"
        " AND o.tenant_id = (SELECT tenant_id FROM payments WHERE id = %s)"
        " AND NOT EXISTS (SELECT FROM refunds r WHERE r.operation_id = o.id)",
        (payment["payment_id"],),
    ).fetchone()
    assert bare == {"n": 0}


def test_concurrent_refunds_through_one_api_never_exceed_the_payment(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    payment = paid(client)
    answers = _refund_all([client], payment["payment_id"])
    _assert_never_beyond(answers, payment, client, faults, db)


def test_concurrent_refunds_through_two_api_processes_never_exceed_the_payment(
    spawn: Spawner,
    api: Process,
    tenant: TenantHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    payment = paid(client)
    second = spawn.api()
    with api_client(second, tenant) as other:
        answers = _refund_all([client, other], payment["payment_id"])
    _assert_never_beyond(answers, payment, client, faults, db)


def test_in_flight_refunds_hold_their_amount(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    """A refund whose outcome is unknown still counts: nothing may be refunded past it."""
    payment = paid(client)
    # The provider refunds, then never answers: the session API gives up after 2 s (202).
    faults.add("timeout_after_commit", account_id=payment["account_id"], delay_s=5)
    pending = post_refund(client, payment["payment_id"], refund_body(amount="9.00"), key=new_key())
    assert pending.status_code == 202, pending.text
    assert pending.json()["state"] == "UNKNOWN_REQUIRES_RECOVERY"
    refused = post_refund(client, payment["payment_id"], refund_body(amount="1.01"), key=new_key())
    assert refused.status_code == 422, refused.text
    fits = post_refund(client, payment["payment_id"], refund_body(amount="1.00"), key=new_key())
    assert fits.status_code == 201, fits.text


def test_a_refund_in_flight_answers_409_to_its_key_and_holds_its_amount(
    background: ThreadPoolExecutor,
    spawn: Spawner,
    tenant: TenantHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    payment = paid(client)
    held = spawn.api(PAYMENTS_FAILPOINTS="after_claim=30")
    key, body = new_key(), refund_body(amount="6.00")
    answer = refund_in_background(background, held, tenant, payment["payment_id"], key, body)
    wait_until(
        lambda: refund_operation(db, tenant, key) is not None,
        timeout=30,
        message="the refund's claim",
    )
    in_progress = post_refund(client, payment["payment_id"], body, key=key)
    assert in_progress.status_code == 409, in_progress.text
    assert in_progress.json()["code"] == "IDEMPOTENCY_REQUEST_IN_PROGRESS"
    assert in_progress.headers["link"].endswith('rel="monitor"')
    beyond = post_refund(client, payment["payment_id"], refund_body(amount="4.01"), key=new_key())
    assert beyond.status_code == 422, beyond.text
    assert beyond.json()["amount_refundable"] == "4.00"
    held.kill()
    with pytest.raises(httpx.TransportError):
        answer.result(timeout=30)
    assert faults.refunds(charge_id=payment["provider_charge_id"]) == []
