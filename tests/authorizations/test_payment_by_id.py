"""A capture or void reads and writes its payment on the payment's own days.

The claim's guard reads the payment by id within the window its id tells (`app/ids.py`);
the outcome's write to the payment names its `created_at` as the payment was read with the
capture or void. A payment made before v7 ids has every time in its window.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import httpx
import psycopg
from psycopg.rows import DictRow

from app.authorizations import repository as modifications
from app.authorizations.rows import ModificationRow, ModificationStatus, ModificationType
from tests.support.control.id_windows import made_before_v7_ids, moved_out_of_its_window
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]


def test_a_payment_made_before_v7_ids_is_captured(client: httpx.Client, db: Db) -> None:
    legacy = made_before_v7_ids(db, authorized(client, amount="10.00")["payment_id"])

    captured = post_capture(client, legacy, "4.00")

    assert captured.status_code == 201, captured.text
    payment = client.get(f"/payments/{legacy}").json()
    assert (payment["status"], payment["amount_captured"]) == ("PARTIALLY_CAPTURED", "4.00")


def test_a_payment_made_before_v7_ids_is_voided(client: httpx.Client, db: Db) -> None:
    legacy = made_before_v7_ids(db, authorized(client)["payment_id"])

    voided = post_void(client, legacy)

    assert voided.status_code == 201, voided.text
    assert client.get(f"/payments/{legacy}").json()["status"] == "VOIDED"


def _guarded(db: Db, tenant: TenantHandle, payment_id: str) -> bool:
    """Whether the capture claim's guard reads the payment (under its lock; rolled back)."""
    guard = modifications.claim_guard(
        tenant_id=tenant.id, payment_id=uuid.UUID(payment_id), capture=True
    )
    with db.transaction(force_rollback=True):
        return db.execute(guard.sql, guard.params).fetchone() is not None


def test_the_claims_guard_reads_the_payment_within_its_ids_window(
    client: httpx.Client, db: Db, tenant: TenantHandle
) -> None:
    payment_id = authorized(client)["payment_id"]
    assert _guarded(db, tenant, payment_id)

    with moved_out_of_its_window(db, "payments", payment_id):
        # Read, were the guard not bounded: the bound is what misses it.
        assert not _guarded(db, tenant, payment_id)

    legacy = made_before_v7_ids(db, payment_id)
    assert _guarded(db, tenant, legacy)


def _payment_written(db: Db, row: ModificationRow, payment_created_at: datetime) -> int:
    """How many payments the capture's outcome writes to, as its statement runs it with the
    payment's `created_at` given (its operation's write landed); rolled back."""
    write = modifications.result_with_outcome(
        row,
        payment_created_at=payment_created_at,
        status=ModificationStatus.SUCCEEDED,
        provider_reference="cap_1",
        at=row.updated_at,
    )
    [to_payment] = write.also
    params = write.params | {"tenant_id": row.tenant_id}
    with db.transaction(force_rollback=True):
        return db.execute(f"WITH changed AS (SELECT) {to_payment}", params).rowcount


def test_the_outcomes_write_names_the_payments_day(
    client: httpx.Client, db: Db, async_db: AsyncDb, tenant: TenantHandle
) -> None:
    payment_id = authorized(client, amount="10.00")["payment_id"]
    made = post_capture(client, payment_id, "1.00")
    assert made.status_code == 201, made.text

    async def read() -> ModificationRow | None:
        async with async_db.db.connection() as conn:
            return await modifications.get(
                conn,
                tenant_id=tenant.id,
                record_id=uuid.UUID(made.json()["capture_id"]),
                type=ModificationType.CAPTURE,
            )

    row = async_db.run(read())
    assert row is not None
    day = db.execute("SELECT created_at FROM payments WHERE id = %s", (payment_id,)).fetchone()
    assert day is not None
    assert _payment_written(db, row, day["created_at"]) == 1
    # Written, were the write not to name the payment's `created_at`.
    assert _payment_written(db, row, day["created_at"] - timedelta(microseconds=1)) == 0
