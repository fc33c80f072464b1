"""How a worker process ends: SIGTERM (graceful) and SIGKILL (nothing graceful at all).

SIGTERM (the spec, "Recovery"): a worker finishes or releases what it owns and exits. This
worker reconciles every operation of a batch the moment it claims it (nothing claimed waits
in a queue), so there is nothing to release: it claims nothing new, finishes the
reconciliations under way, each bounded by the provider timeout, and exits. Nothing stays
owned by a process that no longer exists.

SIGKILL: whatever the dead worker owned is taken over by another worker once the lease has
run out, by the database clock, and completed exactly once.
"""

from __future__ import annotations

import signal

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.ledger import assert_completed_once
from tests.support.readers.operations import (
    make_due,
    operation,
    transitions,
    wait_for_state,
    wait_owned_by,
)

# One batch: the worker claims them all in one pass and reconciles them at once.
BATCH = 6


def _unknown_operations(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow], count: int
) -> list[str]:
    """`count` operations whose answers were lost (charged at the provider), all due now."""
    account_id = payment_body()["account_id"]
    faults.add("error_after_commit", account_id=account_id, times=count)
    ids = []
    for _ in range(count):
        accepted = post_payment(client, payment_body(account_id=account_id), key=new_key())
        assert accepted.status_code == 202, accepted.text
        ids.append(accepted.json()["operation_id"])
    for operation_id in ids:
        make_due(db, operation_id)
    return ids


def test_sigterm_finishes_every_owned_operation_and_exits_zero(
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    ids = _unknown_operations(client, faults, db, BATCH)
    # Each reconciliation holds for 2 s after finding the charge, before recording it, so
    # SIGTERM arrives while all of them are under way.
    worker = spawn.worker(
        once=False, PAYMENTS_FAILPOINTS="before_record=2", PAYMENTS_RECONCILE_INTERVAL_S="0.2"
    )
    for operation_id in ids:
        wait_owned_by(db, operation_id, worker)
    assert all(operation(db, i)["state"] != "COMPLETED" for i in ids), "signal came too late"

    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(timeout=30) == 0, worker.log()[-5000:]

    # Every reconciliation under way was finished by the stopping worker, none abandoned.
    for operation_id in ids:
        row = operation(db, operation_id)
        assert (row["state"], row["lease_owner"]) == ("COMPLETED", None), row
        completion, _ = assert_completed_once(db, faults, operation_id)
        assert completion["actor"].endswith(f":{worker.pid}")


def test_sigkilled_workers_operation_is_taken_over_once_its_lease_expires(
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    (operation_id,) = _unknown_operations(client, faults, db, 1)
    doomed = spawn.worker(
        once=False,
        **FAST_WORKER,
        PAYMENTS_FAILPOINTS="before_record=30",
    )
    held = wait_owned_by(db, operation_id, doomed)
    doomed.kill()
    # Dead, but its lease still stands: nothing released it.
    row = operation(db, operation_id)
    assert (row["state"], row["lease_owner"]) == (held["state"], held["lease_owner"])

    successor = spawn.worker(once=False, **FAST_WORKER)
    wait_for_state(db, operation_id, "COMPLETED", "FAILED")

    completion, _ = assert_completed_once(db, faults, operation_id)
    assert completion["actor"].endswith(f":{successor.pid}")
    assert completion["fence"] > held["fence"]
    assert completion["created_at"] >= held["lease_expires_at"]
    assert not [t for t in transitions(db, operation_id) if t["actor"].endswith(f":{doomed.pid}")]
    wait_until(lambda: operation(db, operation_id)["lease_owner"] is None, message="no owner")
