"""A payment's id tells its day: a read by id names the window of `created_at` it tells.

GET /payments/{id} and the operators' read of a payment by id (the console's payment page)
read `payments` within the window the id tells (`app/ids.py`); an id made before the
service made UUIDv7 ids tells nothing, and its read reads every day, as before.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import psycopg
from psycopg.rows import DictRow

from app.ids import id_time
from app.payments import operator_reads
from app.payments.rows import PaymentRow
from tests.support.control.id_windows import made_before_v7_ids, moved_out_of_its_window
from tests.support.factories.refunds import paid
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]


def test_a_payments_id_is_a_uuidv7_made_at_its_claim(client: httpx.Client, db: Db) -> None:
    payment = paid(client)
    payment_id = uuid.UUID(payment["payment_id"])
    row = db.execute("SELECT created_at FROM payments WHERE id = %s", (payment_id,)).fetchone()
    assert row is not None
    made = id_time(payment_id)
    assert made is not None, payment_id
    # The service's clock and the database's: the same machine here, so close together.
    assert abs(made - row["created_at"]) < timedelta(seconds=5)
    operation_id = uuid.UUID(payment["operation_id"])
    assert operation_id.version == 7


def test_a_payment_made_before_v7_ids_is_read_by_its_id(client: httpx.Client, db: Db) -> None:
    legacy = made_before_v7_ids(db, paid(client)["payment_id"])

    answer = client.get(f"/payments/{legacy}")

    assert answer.status_code == 200, answer.text
    assert answer.json()["payment_id"] == legacy


def test_a_payment_is_read_within_the_window_its_id_tells(client: httpx.Client, db: Db) -> None:
    payment_id = paid(client)["payment_id"]
    assert client.get(f"/payments/{payment_id}").status_code == 200

    with moved_out_of_its_window(db, "payments", payment_id):
        # Found, were the read not bounded: the bound is what misses it.
        assert client.get(f"/payments/{payment_id}").status_code == 404

    assert client.get(f"/payments/{payment_id}").status_code == 200


def _by_id(async_db: AsyncDb, payment_id: str) -> PaymentRow | None:
    async def read() -> PaymentRow | None:
        async with async_db.db.connection() as conn:
            return await operator_reads.payment_by_id(conn, uuid.UUID(payment_id))

    return async_db.run(read())


def test_the_operators_read_of_a_payment_by_id_is_bounded_by_its_window(
    client: httpx.Client, db: Db, async_db: AsyncDb
) -> None:
    payment_id = paid(client)["payment_id"]
    found = _by_id(async_db, payment_id)
    assert found is not None
    assert str(found.id) == payment_id

    with moved_out_of_its_window(db, "payments", payment_id):
        assert _by_id(async_db, payment_id) is None

    legacy = made_before_v7_ids(db, payment_id)
    found = _by_id(async_db, legacy)
    assert found is not None
    assert str(found.id) == legacy
