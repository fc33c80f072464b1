"""A worker's window: at most PAYMENTS_RECONCILE_CONCURRENCY operations owned at once, and
the window refilled as they finish, in batches of PAYMENTS_RECONCILE_BATCH_SIZE.

Each reconciliation holds a while after finding the charge and before recording it (the
`before_record` failpoint), so what the worker owns can be counted in the database while it
works: it must fill its window and never go past it. Every operation still ends COMPLETED
once, with one charge.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from app.composition import provider_connections
from app.provider.wire import DEFAULT_MAX_CONNECTIONS
from app.provider_events.apply import APPLY_PACE
from app.settings import Settings
from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.ledger import assert_completed_once
from tests.support.readers.operations import make_due, operation

WINDOW = 4
BATCH = 2
OPERATIONS = 10


def test_a_worker_fills_its_window_and_never_owns_more(
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    account_id = payment_body()["account_id"]
    faults.add("error_after_commit", account_id=account_id, times=OPERATIONS)
    ids = []
    for _ in range(OPERATIONS):
        accepted = post_payment(client, payment_body(account_id=account_id), key=new_key())
        assert accepted.status_code == 202, accepted.text
        ids.append(accepted.json()["operation_id"])
    for operation_id in ids:
        make_due(db, operation_id)

    worker = spawn.worker(
        once=True,
        PAYMENTS_RECONCILE_CONCURRENCY=str(WINDOW),
        PAYMENTS_RECONCILE_BATCH_SIZE=str(BATCH),
        PAYMENTS_FAILPOINTS="before_record=1",
    )
    owned: list[int] = []

    def sample_until_exit() -> bool:
        # Operations of any tenant this worker holds a live lease on, right now.
        row = db.execute(
            "SELECT count(*) AS n FROM operations WHERE lease_owner LIKE %s"
            " AND lease_expires_at > now() AND state NOT IN ('COMPLETED', 'FAILED')",
            (f"worker:%:{worker.pid}",),
        ).fetchone()
        assert row is not None
        owned.append(int(row["n"]))
        return not worker.alive()

    wait_until(sample_until_exit, timeout=60, interval=0.05, message="the worker's exit")
    assert worker.wait_exit(timeout=5) == 0, worker.log()[-5000:]

    assert max(owned) == WINDOW, owned
    for operation_id in ids:
        row = operation(db, operation_id)
        assert (row["state"], row["lease_owner"]) == ("COMPLETED", None), row
        completion, _ = assert_completed_once(db, faults, operation_id)
        assert completion["actor"].endswith(f":{worker.pid}")


def test_the_provider_client_has_a_connection_for_every_reconciliation_in_the_window() -> None:
    # Past the client's default, lookups would queue for a connection with the provider idle.
    wide = Settings(reconcile_concurrency=DEFAULT_MAX_CONNECTIONS * 2)
    assert provider_connections(wide) == DEFAULT_MAX_CONNECTIONS * 2
    narrow = Settings(reconcile_concurrency=4)
    assert provider_connections(narrow) == DEFAULT_MAX_CONNECTIONS


def test_a_worker_applying_provider_events_has_a_connection_for_their_window_too() -> None:
    # The events' reconciliations run beside recovery's, each one provider call at a time.
    notified = Settings(
        reconcile_concurrency=DEFAULT_MAX_CONNECTIONS,
        provider_event_secrets={"primary": ["whsec_" + "k" * 32]},
    )
    assert provider_connections(notified) == DEFAULT_MAX_CONNECTIONS + APPLY_PACE.window
