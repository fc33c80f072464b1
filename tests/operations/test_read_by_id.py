"""An operation's id tells its day: a read by id names the window of `created_at` it tells.

The status endpoint (GET /operations/{id}), the operators' read of an operation
(GET /admin/operations/{id}), the list's cursor and the stored trace context read
`operations` within the window the id tells (`app/ids.py`); an operation claimed with a
random (v4) id, as every one before this release, tells nothing and is read from every day.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.operations import operator_reads
from tests.support.control.id_windows import moved_out_of_its_window
from tests.support.factories.claims import claim_payment
from tests.support.factories.refunds import paid
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]


@pytest.fixture
def legacy_operation(db: Db, async_db: AsyncDb, tenant: TenantHandle) -> Iterator[uuid.UUID]:
    """An operation of the tenant claimed with a random (v4) id, as before this release.

    It has no payment, so it is deleted at the end: no worker may meet it.
    """
    operation_id = uuid.uuid4()

    async def claim() -> None:
        async with async_db.db.transaction() as conn:
            assert await claim_payment(
                conn,
                tenant_id=tenant.id,
                operation_id=operation_id,
                key=f"legacy-{operation_id}",
                owner="api:legacy",
                lease_s=600,
            )

    async_db.run(claim())
    yield operation_id
    db.execute("DELETE FROM operations WHERE id = %s", (operation_id,))


def test_an_operation_claimed_before_v7_ids_is_read_by_its_id(
    client: httpx.Client, admin_client: httpx.Client, legacy_operation: uuid.UUID
) -> None:
    answer = client.get(f"/operations/{legacy_operation}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["operation_id"] == str(legacy_operation)
    assert len(answer.json()["history"]) == 2
    by_operator = admin_client.get(f"/admin/operations/{legacy_operation}")
    assert by_operator.status_code == 200, by_operator.text


def test_an_operation_is_read_within_the_window_its_id_tells(
    client: httpx.Client, admin_client: httpx.Client, db: Db
) -> None:
    operation_id = paid(client)["operation_id"]
    assert uuid.UUID(operation_id).version == 7
    assert client.get(f"/operations/{operation_id}").status_code == 200

    with moved_out_of_its_window(db, "operations", operation_id):
        # Found, were the reads not bounded: the bound is what misses it.
        assert client.get(f"/operations/{operation_id}").status_code == 404
        assert admin_client.get(f"/admin/operations/{operation_id}").status_code == 404

    assert client.get(f"/operations/{operation_id}").status_code == 200
    assert admin_client.get(f"/admin/operations/{operation_id}").status_code == 200


def test_the_lists_cursor_is_read_within_its_ids_window(
    client: httpx.Client, db: Db, async_db: AsyncDb, tenant: TenantHandle
) -> None:
    first, second = paid(client)["operation_id"], paid(client)["operation_id"]

    def after(cursor: str) -> list[str]:
        async def page() -> list[str]:
            flt = operator_reads.OperationFilter(tenant_id=tenant.id, after=uuid.UUID(cursor))
            async with async_db.db.connection() as conn:
                found = await operator_reads.list_operations(conn, flt, limit=10, key_ttl_s=60)
            return [str(snapshot.operation.id) for snapshot in found.items]

        return async_db.run(page())

    assert after(first) == [second]
    with moved_out_of_its_window(db, "operations", first):
        # The cursor's row is not in its window: no page follows a cursor that is not found.
        assert after(first) == []
