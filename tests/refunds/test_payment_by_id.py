"""A refund reads and writes its payment within the window the payment's id tells.

The payment is of its own day, not the refund's: the claim's lock reads it by id within the
window its id tells (`app/ids.py`), and the outcome's write to it names that window too. A
payment made before v7 ids has every time in its window: refunded as before.
"""

from __future__ import annotations

import uuid

import httpx
import psycopg
from psycopg.rows import DictRow

from app.refunds import repository as refunds
from app.refunds.repository import LockedPayment
from app.refunds.rows import RefundRow, RefundStatus
from tests.support.control.id_windows import made_before_v7_ids, moved_out_of_its_window
from tests.support.factories.payments import new_key
from tests.support.factories.refunds import paid, post_refund, refund_body
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]


def test_a_payment_made_before_v7_ids_is_refunded(client: httpx.Client, db: Db) -> None:
    legacy = made_before_v7_ids(db, paid(client, amount="10.00")["payment_id"])

    refunded = post_refund(client, legacy, refund_body(amount="4.00"), key=new_key())

    assert refunded.status_code == 201, refunded.text
    payment = client.get(f"/payments/{legacy}").json()
    assert (payment["status"], payment["amount_refunded"]) == ("PARTIALLY_REFUNDED", "4.00")


def _locked(async_db: AsyncDb, tenant: TenantHandle, payment_id: str) -> LockedPayment | None:
    async def lock() -> LockedPayment | None:
        async with async_db.db.transaction() as conn:
            return await refunds.lock_payment(
                conn, tenant_id=tenant.id, payment_id=uuid.UUID(payment_id)
            )

    return async_db.run(lock())


def test_the_claims_lock_reads_the_payment_within_its_ids_window(
    client: httpx.Client, db: Db, async_db: AsyncDb, tenant: TenantHandle
) -> None:
    payment_id = paid(client)["payment_id"]
    assert _locked(async_db, tenant, payment_id) is not None

    with moved_out_of_its_window(db, "payments", payment_id):
        # Found, were the lock's read not bounded: the bound is what misses it.
        assert _locked(async_db, tenant, payment_id) is None

    legacy = made_before_v7_ids(db, payment_id)
    assert _locked(async_db, tenant, legacy) is not None


def _refund(async_db: AsyncDb, tenant: TenantHandle, refund_id: str) -> RefundRow:
    async def read() -> RefundRow | None:
        async with async_db.db.connection() as conn:
            return await refunds.get(conn, tenant_id=tenant.id, refund_id=uuid.UUID(refund_id))

    found = async_db.run(read())
    assert found is not None
    return found


def _payment_written(db: Db, refund: RefundRow) -> int:
    """How many payments the succeeded refund's write to its payment changes, as its
    outcome's statement runs it (its operation's write landed); rolled back."""
    write = refunds.result_with_outcome(
        refund, status=RefundStatus.SUCCEEDED, provider_refund_id="re_1", at=refund.updated_at
    )
    [to_payment] = write.also
    params = write.params | {"tenant_id": refund.tenant_id}
    with db.transaction(force_rollback=True):
        return db.execute(f"WITH changed AS (SELECT) {to_payment}", params).rowcount


def test_the_outcomes_write_names_the_payments_window(
    client: httpx.Client, db: Db, async_db: AsyncDb, tenant: TenantHandle
) -> None:
    payment_id = paid(client, amount="10.00")["payment_id"]
    made = post_refund(client, payment_id, refund_body(amount="1.00"), key=new_key())
    assert made.status_code == 201, made.text
    refund = _refund(async_db, tenant, made.json()["refund_id"])
    assert _payment_written(db, refund) == 1

    with moved_out_of_its_window(db, "payments", payment_id):
        # Written, were the write not bounded: the window names the payment's days.
        assert _payment_written(db, refund) == 0
