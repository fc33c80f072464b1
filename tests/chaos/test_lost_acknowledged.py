"""The chaos check for a lost acknowledged payment fires on real rows.

A payment the API answered `201` for must still exist afterwards, with its charge. Here a
real API, on the session's PostgreSQL, with a fake provider of the test's own (so the ledger
holds only this test's charges), charges a payment and answers 201; then the payment's rows
are removed, as a database failover that lost acknowledged commits would leave them. The
snapshot is read the way the chaos run reads it (`chaos.run.read_snapshot`), and
`check_all` must report the acknowledged payment as missing and its charge as unexplained.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from chaos.checks import check_all
from chaos.run import read_snapshot
from tests.support.control.spawner import Spawner
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import make_tenant


def _record(key: str, body: dict[str, Any], response: httpx.Response) -> dict[str, Any]:
    """The history record a chaos client writes for one answer (chaos/clients.py)."""
    problem = response.headers.get("content-type", "").startswith("application/problem")
    return {
        "key": key,
        "role": "original",
        "status": response.status_code,
        "body": response.text,
        "amount": body["amount"],
        "code": response.json().get("code") if problem else None,
    }


def test_a_payment_acknowledged_then_lost_is_reported(
    spawn: Spawner, tmp_path: Path, database_url: str, db: psycopg.Connection[DictRow]
) -> None:
    provider = spawn.provider(tmp_path / "ledger.sqlite3")
    assert provider.url is not None
    api = spawn.api(PAYMENTS_PROVIDER_URL=provider.url)
    tenant = make_tenant(db, "lost acknowledged")
    key, body = new_key(), payment_body(amount="12.34")
    with httpx.Client(
        base_url=str(api.url), headers={"Authorization": f"Bearer {tenant.api_key}"}, timeout=30
    ) as client:
        answered = client.post("/payments", json=body, headers={"Idempotency-Key": key})
    assert answered.status_code == 201, answered.text
    history = [_record(key, body, answered)]
    payment_id = uuid.UUID(answered.json()["payment_id"])

    # As acknowledged: the checks find nothing wrong.
    before = read_snapshot(database_url, tenant.id, provider.url)
    assert len(before.payments) == 1
    assert len(before.ledger) == 1
    assert check_all(history, before) == []

    # The database loses the payment's commit (its audit rows and events go with it).
    operation_id = db.execute(
        "SELECT operation_id FROM payments WHERE id = %s", (payment_id,)
    ).fetchone()
    assert operation_id is not None
    with db.transaction():
        db.execute("DELETE FROM payments WHERE id = %s", (payment_id,))
        db.execute("DELETE FROM operations WHERE id = %s", (operation_id["operation_id"],))

    after = read_snapshot(database_url, tenant.id, provider.url)
    assert (after.operations, after.payments) == ([], [])
    assert len(after.ledger) == 1
    found = {(v.check, v.key, v.detail) for v in check_all(history, after)}
    charge = after.ledger[0]
    assert found == {
        ("success_matches_ledger", key, f"payment {payment_id} does not exist"),
        (
            "one_charge_per_key",
            charge["idempotency_key"],
            f"charge {charge['charge_id']} belongs to no payment of ours",
        ),
    }
