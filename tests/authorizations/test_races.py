"""Captures and voids of one authorization racing each other, with different keys: at most
one is in flight, the others are refused with a 409 and sent nowhere, and what the provider
made is what our books say."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.tenants import TenantHandle, api_client

REFUSED = {"PAYMENT_MODIFICATION_IN_PROGRESS", "PAYMENT_NOT_CAPTURABLE", "PAYMENT_NOT_VOIDABLE"}


def test_a_capture_racing_a_void_one_wins_the_other_is_refused(
    api: Process, tenant: TenantHandle, client: httpx.Client, faults: FaultInjector
) -> None:
    rounds = 12
    payments = [authorized(client) for _ in range(rounds)]

    def capture(pid: str) -> httpx.Response:
        with api_client(api, tenant) as http:
            return post_capture(http, pid)

    def void(pid: str) -> httpx.Response:
        with api_client(api, tenant) as http:
            return post_void(http, pid)

    with ThreadPoolExecutor(max_workers=2 * rounds) as pool:
        races = [
            (pool.submit(capture, p["payment_id"]), pool.submit(void, p["payment_id"]))
            for p in payments
        ]
        answers = [(c.result(), v.result()) for c, v in races]
    for payment, (captured, voided) in zip(payments, answers, strict=True):
        statuses = sorted((captured.status_code, voided.status_code))
        assert statuses == [201, 409], (captured.text, voided.text)
        loser = captured if captured.status_code == 409 else voided
        assert loser.json()["code"] in REFUSED, loser.text
        [charge] = faults.charges(reference=payment["payment_id"])
        made = faults.captures(charge_id=charge["charge_id"]) + faults.voids(
            charge_id=charge["charge_id"]
        )
        assert len(made) == 1, made
        after = client.get(f"/payments/{payment['payment_id']}").json()
        assert after["status"] == ("CAPTURED" if captured.status_code == 201 else "VOIDED")


def test_concurrent_partial_captures_never_pass_the_authorization(
    api: Process, tenant: TenantHandle, client: httpx.Client, faults: FaultInjector
) -> None:
    payment = authorized(client, amount="10.00")
    pid = payment["payment_id"]

    def capture(_: int) -> httpx.Response:
        with api_client(api, tenant) as http:
            return post_capture(http, pid, "3.00")

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(capture, range(16)))
    won = [a for a in answers if a.status_code == 201]
    for lost in (a for a in answers if a.status_code != 201):
        assert lost.status_code in (409, 422), lost.text
        assert lost.json()["code"] in REFUSED | {"CAPTURE_EXCEEDS_CAPTURABLE"}
    assert 1 <= len(won) <= 3
    [charge] = faults.charges(reference=pid)
    assert len(faults.captures(charge_id=charge["charge_id"])) == len(won)
    after = client.get(f"/payments/{pid}").json()
    assert after["amount_captured"] == f"{3 * len(won)}.00"


def test_the_database_refuses_a_second_modification_in_flight(
    client: httpx.Client, db: psycopg.Connection[DictRow]
) -> None:
    # The guard behind the claim's lock and check: a second PENDING capture or void of one
    # payment cannot be stored, whoever writes it.
    payment = authorized(client)
    assert post_capture(client, payment["payment_id"], "1.00").status_code == 201
    row = db.execute(
        "SELECT * FROM payment_modifications WHERE payment_id = %s", (payment["payment_id"],)
    ).fetchone()
    assert row is not None
    insert = """
        INSERT INTO payment_modifications (id, tenant_id, payment_id, operation_id, type,
            provider_key, charge_id, provider, status, amount_minor, currency)
        SELECT %(id)s, m.tenant_id, m.payment_id, p.operation_id, 'capture', %(key)s,
               m.charge_id, m.provider, 'PENDING', 100, m.currency
        FROM payment_modifications m JOIN payments p ON p.id = m.payment_id
        WHERE m.id = %(of)s
    """
    db.execute("UPDATE payment_modifications SET status = 'PENDING' WHERE id = %s", (row["id"],))
    new = uuid.uuid4()
    try:
        with pytest.raises(psycopg.errors.UniqueViolation, match="in_flight"):
            db.execute(insert, {"id": new, "key": f"capture-{new}", "of": row["id"]})
    finally:
        db.execute(
            "UPDATE payment_modifications SET status = 'SUCCEEDED' WHERE id = %s", (row["id"],)
        )


def test_the_database_refuses_a_capture_beyond_the_authorization(
    client: httpx.Client, db: psycopg.Connection[DictRow]
) -> None:
    payment = authorized(client, amount="10.00")
    with pytest.raises(psycopg.errors.CheckViolation, match="captured_within_amount"):
        db.execute(
            "UPDATE payments SET amount_captured_minor = 1001 WHERE id = %s",
            (payment["payment_id"],),
        )
