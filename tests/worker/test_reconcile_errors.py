"""A reconcile that raises is a check that settled nothing: counted, backed off, flagged.

Before, the worker logged the exception and kept the operation until its lease ran out, so
it was claimed again every lease period, forever, and never reached `needs_attention`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.spawner import Spawner
from tests.support.factories.payments import new_key
from tests.support.factories.tenants import TenantHandle
from tests.support.readers.operations import operation, transitions


@pytest.fixture
def broken_operation(db: psycopg.Connection[DictRow], tenant: TenantHandle) -> Iterator[str]:
    """A stalled operation whose payment row is missing: reconciling it raises.

    Deleted afterwards, so no later test's worker meets it.
    """
    operation_id = str(uuid.uuid4())
    db.execute(
        "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,"
        " state, lease_owner, lease_expires_at)"
        " VALUES (%s, %s, 'create_payment', %s, %s, 'RECEIVED', 'api:gone', now())",
        (operation_id, tenant.id, new_key(), "0" * 64),
    )
    yield operation_id
    db.execute("DELETE FROM operations WHERE id = %s", (operation_id,))


def test_a_failing_reconcile_counts_an_attempt_and_flags_past_the_limit(
    spawn: Spawner, db: psycopg.Connection[DictRow], broken_operation: str
) -> None:
    worker = spawn.worker(once=True, PAYMENTS_MAX_ATTEMPTS="1", PAYMENTS_BACKOFF_BASE_S="60")
    assert worker.wait_exit(timeout=60) == 0, worker.log()[-3000:]

    row = operation(db, broken_operation)
    assert row["state"] == "UNKNOWN_REQUIRES_RECOVERY", row
    assert (row["attempts"], row["needs_attention"], row["lease_owner"]) == (1, True, None)
    assert row["last_error"].startswith("reconcile failed: LookupError")
    # Not due again until the backoff has passed: no claim loop.
    assert db.execute(
        "SELECT next_check_at > now() + interval '20 seconds' AS later FROM operations"
        " WHERE id = %s",
        (broken_operation,),
    ).fetchone() == {"later": True}
    last = transitions(db, broken_operation)[-1]
    assert (last["from_state"], last["to_state"], last["trigger"]) == (
        "RECEIVED",
        "UNKNOWN_REQUIRES_RECOVERY",
        "lose",
    )
    assert last["actor"].endswith(f":{worker.pid}")
    assert "reconciling operation" in worker.log()
