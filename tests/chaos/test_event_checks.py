"""The chaos run's event checks (`chaos.webhooks.check_events`) fire on real rows.

Real payments through the session's API on the session's PostgreSQL, each test with its own
tenant; the consumer's inbox is the example receiver's SQLite table, written here with the
event ids the test says were delivered. Each test breaks exactly one rule of the events and
must see exactly that violation; a consistent tenant must see none.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from chaos.webhooks import Consumer, check_events
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import free_port
from tests.support.control.spawner import Spawner
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle
from tests.support.factories.webhooks import create_endpoint

Db = psycopg.Connection[DictRow]


def _consumer(tmp_path: Path, delivered: list[uuid.UUID]) -> Consumer:
    """A consumer whose inbox holds `delivered` (as the example receiver records them)."""
    consumer = Consumer(tmp_path)
    with sqlite3.connect(consumer.inbox) as conn:
        conn.execute("CREATE TABLE inbox (event_id TEXT PRIMARY KEY)")
        conn.executemany("INSERT INTO inbox VALUES (?)", [(f"evt_{e.hex}",) for e in delivered])
    return consumer


def _events(db: Db, tenant: TenantHandle) -> list[dict[str, Any]]:
    rows = db.execute(
        "SELECT id, operation_id, type FROM events WHERE tenant_id = %s ORDER BY seq",
        (tenant.id,),
    ).fetchall()
    return [dict(r) for r in rows]


def _succeeded_payment(client: httpx.Client, db: Db, tenant: TenantHandle) -> dict[str, Any]:
    """A payment answered 201, and its one event (payment.succeeded)."""
    assert post_payment(client, key=new_key()).status_code == 201
    events = _events(db, tenant)
    assert [e["type"] for e in events] == ["payment.succeeded"]
    return events[0]


def _violations(
    database_url: str, tenant: TenantHandle, consumer: Consumer
) -> tuple[list[str], dict[str, int]]:
    return check_events(database_url, tenant.id, consumer)


def test_a_consistent_tenant_has_no_violation(
    client: httpx.Client, db: Db, tenant: TenantHandle, database_url: str, tmp_path: Path
) -> None:
    event = _succeeded_payment(client, db, tenant)
    violations, stats = _violations(database_url, tenant, _consumer(tmp_path, [event["id"]]))
    assert violations == []
    assert stats == {
        "events": 1,
        "delivered": 1,
        "deliveries_succeeded": 0,
        "attempts": 0,
        "duplicates_ignored": 0,
    }


def test_a_final_outcome_with_the_wrong_event_is_found(
    client: httpx.Client, db: Db, tenant: TenantHandle, database_url: str, tmp_path: Path
) -> None:
    event = _succeeded_payment(client, db, tenant)
    db.execute("UPDATE events SET type = 'payment.declined' WHERE id = %s", (event["id"],))
    violations, _ = _violations(database_url, tenant, _consumer(tmp_path, [event["id"]]))
    assert violations == [
        f"{event['operation_id']} COMPLETED/SUCCEEDED has events ['payment.declined']"
    ]


def test_a_final_outcome_with_two_events_is_found(
    client: httpx.Client, db: Db, tenant: TenantHandle, database_url: str, tmp_path: Path
) -> None:
    # The table allows one event of each type per operation; a second outcome of another
    # type is what a double-recorded outcome would leave.
    event = _succeeded_payment(client, db, tenant)
    twin = uuid.uuid4()
    db.execute(
        "INSERT INTO events (id, tenant_id, type, operation_id, data, operation_created_at)"
        " SELECT %s, tenant_id, 'payment.failed', operation_id, data, operation_created_at"
        " FROM events WHERE id = %s",
        (twin, event["id"]),
    )
    consumer = _consumer(tmp_path, [event["id"], twin])
    violations, _ = _violations(database_url, tenant, consumer)
    found = "['payment.succeeded', 'payment.failed']", "['payment.failed', 'payment.succeeded']"
    assert violations in (
        [f"{event['operation_id']} COMPLETED/SUCCEEDED has events {kinds}"] for kinds in found
    )


def test_a_final_outcome_without_its_event_is_found(
    client: httpx.Client, db: Db, tenant: TenantHandle, database_url: str, tmp_path: Path
) -> None:
    event = _succeeded_payment(client, db, tenant)
    db.execute("DELETE FROM events WHERE id = %s", (event["id"],))
    violations, _ = _violations(database_url, tenant, _consumer(tmp_path, []))
    assert violations == [f"{event['operation_id']} COMPLETED/SUCCEEDED has events []"]


def test_an_outcome_event_for_an_unsettled_operation_is_found(
    client: httpx.Client,
    db: Db,
    tenant: TenantHandle,
    faults: FaultInjector,
    database_url: str,
    tmp_path: Path,
) -> None:
    body = payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    accepted = post_payment(client, body, key=new_key())
    assert accepted.status_code == 202, accepted.text
    operation_id = uuid.UUID(accepted.json()["operation_id"])
    assert _events(db, tenant) == []
    event_id = uuid.uuid4()
    db.execute(
        "INSERT INTO events (id, tenant_id, type, operation_id, data, operation_created_at)"
        " SELECT %s, %s, 'payment.succeeded', id, '{}', created_at FROM operations"
        " WHERE id = %s",
        (event_id, tenant.id, operation_id),
    )
    try:
        violations, _ = _violations(database_url, tenant, _consumer(tmp_path, [event_id]))
        assert violations == [
            f"{operation_id} UNKNOWN_REQUIRES_RECOVERY is not final but has events "
            "['payment.succeeded']"
        ]
    finally:
        # Settle it, so that no later test's worker calls the provider for it.
        assert post_payment(client, body, key=accepted.json()["idempotency_key"]).status_code in (
            201,
            202,
        )


def test_an_event_never_delivered_is_found(
    client: httpx.Client, db: Db, tenant: TenantHandle, database_url: str, tmp_path: Path
) -> None:
    event = _succeeded_payment(client, db, tenant)
    violations, stats = _violations(database_url, tenant, _consumer(tmp_path, []))
    assert violations == [f"1 events never delivered, e.g. ['{event['id']}']"]
    assert (stats["events"], stats["delivered"]) == (1, 0)


def test_a_delivery_not_succeeded_is_found(
    client: httpx.Client, db: Db, tenant: TenantHandle, database_url: str, tmp_path: Path
) -> None:
    # Nobody listens there and no worker of this test delivers: the delivery stays pending.
    endpoint = create_endpoint(client, f"http://127.0.0.1:{free_port()}/hook")
    try:
        event = _succeeded_payment(client, db, tenant)
        violations, stats = _violations(database_url, tenant, _consumer(tmp_path, [event["id"]]))
        assert violations == ["deliveries not all succeeded: {'pending': 1}"]
        assert stats["deliveries_succeeded"] == 0
    finally:
        assert client.delete(f"/webhook-endpoints/{endpoint['id']}").status_code == 204


def test_two_step_events_are_checked_and_an_expiry_without_its_event_is_found(
    client: httpx.Client,
    db: Db,
    tenant: TenantHandle,
    spawn: Spawner,
    database_url: str,
    tmp_path: Path,
) -> None:
    # Authorized, captured in part, the rest voided; and a hold the worker expires.
    held = authorized(client, amount="10.00")["payment_id"]
    assert post_capture(client, held, "4.00").status_code == 201
    assert post_void(client, held).status_code == 201
    lapsed = authorized(client, amount="3.00")
    db.execute(
        "UPDATE payments SET capture_before = now() - interval '1 second' WHERE id = %s",
        (lapsed["payment_id"],),
    )
    spawn.worker(once=True).wait_exit(timeout=60)
    events = _events(db, tenant)
    assert sorted(e["type"] for e in events) == [
        "payment.authorized",
        "payment.authorized",
        "payment.captured",
        "payment.expired",
        "payment.voided",
    ]
    consumer = _consumer(tmp_path, [e["id"] for e in events])
    assert _violations(database_url, tenant, consumer)[0] == []
    expired = next(e for e in events if e["type"] == "payment.expired")
    db.execute("DELETE FROM events WHERE id = %s", (expired["id"],))
    assert _violations(database_url, tenant, consumer)[0] == [
        f"{lapsed['operation_id']} EXPIRED has 0 payment.expired events"
    ]
