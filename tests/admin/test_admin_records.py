"""The operators' lists of payments and refunds: each filter walks an index in page order
(no sort of the table), and the keyset pages cover every row once, newest first."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.payments.operator_reads import Cursor, RecordFilter, RecordPage, list_payments, list_sql
from app.payments.rows import PaymentRow
from app.refunds.operator_reads import list_sql as refunds_list_sql
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.plans import plan
from tests.support.fixtures.repository import AsyncDb

CURSOR = Cursor(datetime.now(UTC), uuid.uuid4())
PLANS = {
    ("payments", "ix_payments_created"): RecordFilter(currency="EUR", before=CURSOR),
    ("payments", "ix_payments_status_created"): RecordFilter(status="DECLINED", before=CURSOR),
    ("payments", "ix_payments_tenant_created"): RecordFilter(tenant_id=uuid.uuid4()),
    ("payments", "ix_payments_account_created"): RecordFilter(account_id="acc_x"),
    ("refunds", "ix_refunds_created"): RecordFilter(currency="EUR", amount_min=100),
    ("refunds", "ix_refunds_tenant_created"): RecordFilter(tenant_id=uuid.uuid4()),
}


@pytest.mark.parametrize(("table", "index"), sorted(PLANS))
def test_a_list_walks_its_index_newest_first(
    table: str, index: str, plan_db: psycopg.Connection[DictRow]
) -> None:
    # On the seeded database (tests/support/fixtures/plans.py): declines are rare there, as
    # deployed, and the planner's choice does not depend on what other tests left behind.
    if table == "refunds":
        sql, params = refunds_list_sql(PLANS[table, index], limit=50)
    else:
        sql, params = list_sql(PLANS[table, index], table=table, limit=50)
    explained = plan(plan_db, sql, params)
    assert index in explained, explained
    assert "Sort" not in explained, explained


def test_keyset_pages_hold_every_payment_once_newest_first(
    client: httpx.Client, tenant: TenantHandle, async_db: AsyncDb
) -> None:
    made = [
        post_payment(client, payment_body(), key=new_key()).json()["payment_id"] for _ in range(5)
    ]
    tenant_id = tenant.id

    async def page(flt: RecordFilter) -> RecordPage[PaymentRow]:
        async with async_db.db.connection() as conn:
            return await list_payments(conn, flt, limit=2)

    seen: list[str] = []
    cursor: Cursor | None = None
    pages = 0
    while True:
        found = async_db.run(page(RecordFilter(tenant_id=tenant_id, before=cursor)))
        seen += [str(p.id) for p in found.items]
        pages += 1
        cursor = found.next
        if cursor is None:
            break
        assert Cursor.parse(str(cursor)) == cursor
    assert seen == list(reversed(made))
    assert pages == 3
    later = datetime.now(UTC) + timedelta(days=1)

    assert async_db.run(page(RecordFilter(tenant_id=tenant_id, created_from=later))).items == []
