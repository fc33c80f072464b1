"""A key's row naming an operation that is not there: an error answered, not a loop.

The key table (`idempotency_keys`) decides the claim, and a taken key is answered from the
operation its row names. Retention never drops a day while a key of it is held
(`app/partitions/holds.py`), so the row always names an operation, unless someone dropped a
partition by hand. Then every claim of that key loses to the row, and the row's operation
cannot be read: the flow used to claim again without end, three statements a round, for as
long as the request lived. It now gives up after `CLAIM_ROUNDS` and answers 500, logged,
having charged nothing.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from app.clock import utcnow
from app.ids import new_id
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle


def test_a_key_row_naming_no_operation_answers_500_and_charges_nothing(
    api: Process,
    client: httpx.Client,
    db: psycopg.Connection[DictRow],
    tenant: TenantHandle,
    faults: FaultInjector,
) -> None:
    key = new_key()
    missing = new_id(utcnow())
    db.execute(
        "INSERT INTO idempotency_keys (tenant_id, operation_name, idempotency_key,"
        " operation_id, operation_created_at) VALUES (%s, 'create_payment', %s, %s, now())",
        (tenant.id, key, missing),
    )
    body = payment_body()

    # Without the bound the request never answers: the client's timeout fails the test.
    response = post_payment(client, body, key=key)

    assert response.status_code == 500, response.text
    assert response.json()["code"] == "INTERNAL_ERROR"
    assert "KeyRowOrphaned" in api.log(), "the error is logged with what it is"
    assert faults.charges(account_id=body["account_id"]) == []
    made = db.execute(
        "SELECT count(*) AS n FROM operations WHERE tenant_id = %s AND idempotency_key = %s",
        (tenant.id, key),
    ).fetchone()
    assert made is not None
    assert made["n"] == 0
    row = db.execute(
        "SELECT operation_id FROM idempotency_keys WHERE tenant_id = %s AND idempotency_key = %s",
        (tenant.id, key),
    ).fetchone()
    assert row is not None
    assert row["operation_id"] == missing, "the key's row is left as found"
