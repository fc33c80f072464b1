"""What the crash and concurrency tests read and wait for: rows, audit trail, ledger.

Every wait is on a condition (a row reaching a state, a lease expired by the database clock,
a charge in the provider's ledger), never on a fixed sleep.
"""

from __future__ import annotations

import os
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.conftest import TenantHandle
from tests.support.faults import FaultInjector
from tests.support.processes import Process, wait_until

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


def lookup(provider: Process, provider_key: str) -> Row | None:
    """The provider's charge under `provider_key`, or None.

    A lookup: it would use up a `lookup_unavailable` rule matching the key, so tests that arm
    one read the whole ledger instead (`FaultInjector.charges`).
    """
    assert provider.url is not None
    response = httpx.get(
        f"{provider.url}/charges", params={"idempotency_key": provider_key}, timeout=10
    )
    if response.status_code == 404:
        return None
    response.raise_for_status()
    charge: Row = response.json()
    return charge


def ledger_by_key(faults: FaultInjector) -> dict[str, list[Row]]:
    """The provider's whole ledger, grouped by idempotency key (the derived provider key)."""
    grouped: dict[str, list[Row]] = {}
    for charge in faults.charges():
        grouped.setdefault(charge["idempotency_key"], []).append(charge)
    return grouped


def assert_agrees_with_ledger(db: Db, operation_id: uuid.UUID | str, ledger: list[Row]) -> None:
    """The payment says SUCCEEDED (with the charge's id) iff the ledger holds its charge."""
    payment = payment_for(db, operation_id)
    if ledger:
        assert len(ledger) == 1, f"charged {len(ledger)} times: {ledger}"
        assert (
            payment["status"]
            == {"succeeded": "SUCCEEDED", "declined": "DECLINED"}[ledger[0]["status"]]
        )
        assert payment["provider_charge_id"] == ledger[0]["charge_id"]
    else:
        assert payment["status"] in ("PENDING", "FAILED"), payment
        assert payment["provider_charge_id"] is None


def assert_completed_once(
    db: Db, faults: FaultInjector, operation_id: uuid.UUID | str
) -> tuple[Row, Row]:
    """COMPLETED through exactly one audited transition, charged exactly once, and the
    payment agrees with the provider's ledger. The COMPLETED transition and the charge."""
    row = operation(db, operation_id)
    assert row["state"] == "COMPLETED", row
    completions = [t for t in transitions(db, operation_id) if t["to_state"] == "COMPLETED"]
    assert len(completions) == 1, completions
    payment = payment_for(db, operation_id)
    charges = faults.charges(idempotency_key=payment["provider_key"])
    assert len(charges) == 1, f"expected one charge, ledger has {charges}"
    assert_agrees_with_ledger(db, operation_id, charges)
    return completions[0], charges[0]


def post_in_background(
    pool: ThreadPoolExecutor, api: Process, tenant: TenantHandle, key: str, body: Row
) -> Future[httpx.Response]:
    """Send `POST /payments` from another thread; the future holds the answer or the error."""
    assert api.url is not None
    url = api.url

    def post() -> httpx.Response:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {tenant.api_key}"}, timeout=120
        ) as http:
            return http.post("/payments", json=body, headers={"Idempotency-Key": key})

    return pool.submit(post)


def wait_charged(provider: Process, provider_key: str, *, timeout: float = 30.0) -> None:
    """Wait until the provider's ledger holds a charge under `provider_key`."""
    wait_until(
        lambda: lookup(provider, provider_key) is not None,
        timeout=timeout,
        interval=0.1,
        message=f"the provider's ledger to show a charge under {provider_key}",
    )


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def connected_to(process: Process, url: str) -> bool:
    """Whether `process` holds an established TCP connection to the port of `url`.

    A worker has no HTTP endpoint to probe; once it holds a connection to PostgreSQL its
    engine is up and its first reconcile pass has run.
    """
    port = urlsplit(url).port
    inodes = _socket_inodes(process.pid)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            established = fields[3] == "01"
            if established and remote_port == port and fields[9] in inodes:
                return True
    return False


def wait_connected(process: Process, url: str, *, timeout: float = 30.0) -> None:
    """Wait until `process` is connected to `url` (see `connected_to`)."""

    def connected() -> bool:
        assert process.alive(), f"{process.name} exited early:\n{process.log()}"
        return connected_to(process, url)

    wait_until(connected, timeout=timeout, message=f"{process.name} connected to {url}")
