"""What the crash and concurrency tests read and wait for in the database: operations,
their audit trail and leases, and the payment or refund each made.

Every wait is on a condition (a row reaching a state, a lease expired by the database
clock), never on a fixed sleep."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import DictRow

from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.tenants import TenantHandle

Db = psycopg.Connection[DictRow]
Row = dict[str, Any]


def operation(db: Db, operation_id: uuid.UUID | str) -> Row:
    """The operation row, with `lease_expired` computed on the database clock."""
    row = db.execute(
        "SELECT *, (lease_expires_at IS NULL OR lease_expires_at <= now()) AS lease_expired"
        " FROM operations WHERE id = %s",
        (operation_id,),
    ).fetchone()
    assert row is not None, f"no operation {operation_id}"
    return dict(row)


def operation_by_key(db: Db, tenant: TenantHandle, key: str) -> Row | None:
    """The tenant's operation for an idempotency key, if the claim has committed."""
    row = db.execute(
        "SELECT * FROM operations WHERE tenant_id = %s AND idempotency_key = %s",
        (tenant.id, key),
    ).fetchone()
    return None if row is None else dict(row)


def payment_for(db: Db, operation_id: uuid.UUID | str) -> Row:
    row = db.execute("SELECT * FROM payments WHERE operation_id = %s", (operation_id,)).fetchone()
    assert row is not None, f"no payment for operation {operation_id}"
    return dict(row)


def transitions(db: Db, operation_id: uuid.UUID | str) -> list[Row]:
    """The audited transitions of one operation, oldest first."""
    rows = db.execute(
        "SELECT * FROM operation_transitions WHERE operation_id = %s ORDER BY id",
        (operation_id,),
    ).fetchall()
    return [dict(r) for r in rows]


def failover_records(db: Db, operation_id: uuid.UUID | str) -> list[Row]:
    """The failover records (`payment_failovers`) of one operation's payment, in order,
    each with the id of the transition it records."""
    rows = db.execute(
        "SELECT f.transition_id, f.from_attempt, f.from_provider, f.to_provider, f.cause,"
        " f.detail FROM payment_failovers f JOIN payments p ON p.id = f.payment_id"
        " WHERE p.operation_id = %s ORDER BY f.from_attempt",
        (operation_id,),
    ).fetchall()
    return [dict(r) for r in rows]


def wait_for_key_state(
    db: Db, tenant: TenantHandle, key: str, state: str, *, timeout: float = 30.0
) -> Row:
    """Wait until the operation for `key` exists and is in `state`; the row."""
    found: list[Row] = []

    def reached() -> bool:
        row = operation_by_key(db, tenant, key)
        if row is not None and row["state"] == state:
            found.append(row)
            return True
        return False

    wait_until(reached, timeout=timeout, message=f"operation for {key} in {state}")
    return found[-1]


def wait_for_state(
    db: Db, operation_id: uuid.UUID | str, *states: str, timeout: float = 30.0
) -> Row:
    """Wait until the operation is in one of `states`; the row."""
    wait_until(
        lambda: operation(db, operation_id)["state"] in states,
        timeout=timeout,
        interval=0.1,
        message=f"operation {operation_id} in {states}",
    )
    return operation(db, operation_id)


def wait_lease_expired(db: Db, operation_id: uuid.UUID | str, *, timeout: float = 30.0) -> None:
    """Wait until the operation's lease is over by the database clock (or gone)."""
    wait_until(
        lambda: bool(operation(db, operation_id)["lease_expired"]),
        timeout=timeout,
        interval=0.1,
        message=f"lease on {operation_id} expired",
    )


def owned_by(db: Db, operation_id: uuid.UUID | str, worker: Process) -> bool:
    """Whether `worker` (by its pid) holds the lease on the operation now."""
    row = operation(db, operation_id)
    owner = row["lease_owner"] or ""
    return owner.startswith("worker:") and owner.endswith(f":{worker.pid}")


def wait_owned_by(
    db: Db, operation_id: uuid.UUID | str, worker: Process, *, timeout: float = 30.0
) -> Row:
    """Wait until `worker` owns the operation; the row at that moment."""

    def owns() -> bool:
        assert worker.alive(), f"worker exited early:\n{worker.log()}"
        return owned_by(db, operation_id, worker)

    wait_until(owns, timeout=timeout, interval=0.05, message=f"worker {worker.pid} owns it")
    return operation(db, operation_id)


def make_due(db: Db, operation_id: uuid.UUID | str) -> None:
    """Bring the next check forward, as if the backoff had elapsed."""
    db.execute("UPDATE operations SET next_check_at = now() WHERE id = %s", (operation_id,))


def refund_operation(db: Db, tenant: TenantHandle, key: str) -> dict[str, Any] | None:
    """The tenant's refund operation for an idempotency key, if one is stored."""
    row = db.execute(
        "SELECT * FROM operations WHERE tenant_id = %s AND operation_name = 'create_refund'"
        " AND idempotency_key = %s",
        (tenant.id, key),
    ).fetchone()
    return None if row is None else dict(row)


def refund_for(db: Db, operation_id: Any) -> dict[str, Any]:
    row = db.execute("SELECT * FROM refunds WHERE operation_id = %s", (operation_id,)).fetchone()
    assert row is not None, f"no refund for operation {operation_id}"
    return dict(row)


def wait_past_last_send(db: Db, operation_id: str, seconds: float) -> None:
    """Until `seconds` have passed (database clock) since the operation's last send."""

    def quiet() -> bool:
        row = db.execute(
            "SELECT now() - max(created_at) >= make_interval(secs => %s) AS quiet"
            " FROM operation_transitions"
            " WHERE operation_id = %s AND to_state = 'PROVIDER_REQUEST_SENT'",
            (seconds, operation_id),
        ).fetchone()
        return bool(row and row["quiet"])

    wait_until(quiet, timeout=seconds + 30, interval=0.2, message="the last send to age")
