"""The worker's batch read: the payments of several operations in one statement.

The worker reads the subjects of a claimed batch at once and hands each reconciler its own;
an operation missing from that read is read by its driver as before. Here the read itself:
each operation's payment under its id (read on its operation's day), and nothing for an
operation that has none.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import httpx
import psycopg

from app.payments import repository as payments
from app.payments.rows import PaymentRow
from tests.support.factories.payments import new_key, payment_body, post_payment


def test_the_payments_of_several_operations_come_back_by_operation_id(
    client: httpx.Client, database_url: str
) -> None:
    answers = [post_payment(client, payment_body(), key=new_key()) for _ in range(3)]
    assert [a.status_code for a in answers] == [201] * 3
    wanted = {uuid.UUID(a.json()["operation_id"]): a.json()["payment_id"] for a in answers}
    nobody = uuid.uuid4()

    async def read() -> dict[uuid.UUID, PaymentRow]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            sql = "SELECT id, created_at FROM operations WHERE id = ANY(%s)"
            rows = await (await conn.execute(sql, (list(wanted),))).fetchall()
            days = {row[0]: row[1] for row in rows} | {nobody: datetime.now(UTC)}
            return await payments.get_for_operations(conn, days)

    found = asyncio.run(read())

    assert {op: str(row.id) for op, row in found.items()} == wanted
    for operation_id, row in found.items():
        assert row.operation_id == operation_id
        assert row.provider_key == f"payment-{row.id}"
