"""A recovery resend the provider refuses (`503`, "not processed") settles nothing.

The rule (`app/recovery/reconcile.py`, `counts_as_check`): the provider certainly did not
process the resend, but an earlier request under the same key may still land, so the
operation stays UNKNOWN_REQUIRES_RECOVERY (never FAILED_RETRYABLE, never FAILED), the check
counts as an attempt, and a later check finishes it. Real processes: the session's API and
fake provider, a `payments worker --once` of the test's own, faults filtered on the test's
account.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.ledger import assert_completed_once
from tests.support.readers.operations import make_due, operation, transitions

# A worker pass that leaves the next check a minute away: `--once` then drains the one
# check and exits, and the test sees what that check came to.
ONE_CHECK = {**FAST_WORKER, "PAYMENTS_BACKOFF_BASE_S": "60", "PAYMENTS_BACKOFF_MAX_S": "120"}


def test_a_refused_resend_keeps_the_operation_unknown_and_counts_as_a_check(
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    # The API's own call is never processed (the provider holds it past the API's timeout
    # and commits nothing); the worker's resend is then refused, before any processing.
    faults.add("timeout_before_commit", account_id=body["account_id"], delay_s=4)
    faults.add("unavailable", account_id=body["account_id"])
    accepted = post_payment(client, body, key=key)
    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    assert operation(db, operation_id)["attempts"] == 0
    make_due(db, operation_id)

    worker = spawn.worker(once=True, **ONE_CHECK)
    assert worker.wait_exit(timeout=60) == 0, worker.log()

    # The resend reached the provider and was refused: its rule is used up, nothing charged.
    assert [r for r in faults.remaining() if r.get("account_id") == body["account_id"]] == []
    assert faults.charges(account_id=body["account_id"]) == []
    row = operation(db, operation_id)
    assert (row["state"], row["attempts"], row["needs_attention"]) == (
        "UNKNOWN_REQUIRES_RECOVERY",
        1,
        False,
    )
    history = transitions(db, operation_id)
    assert [(t["trigger"], t["to_state"]) for t in history] == [
        ("claim", "RECEIVED"),
        ("send", "PROVIDER_REQUEST_SENT"),
        ("lose", "UNKNOWN_REQUIRES_RECOVERY"),
        ("resend", "PROVIDER_REQUEST_SENT"),
        ("lose", "UNKNOWN_REQUIRES_RECOVERY"),
    ]
    assert history[-1]["actor"].startswith("worker:")
    assert (history[-1]["reason"] or "").startswith("resend not processed by the provider: ")
    # The refusal concluded nothing: the client is still told the outcome is unknown, not
    # invited to retry (503) and not told it failed.
    status = client.get(f"/operations/{operation_id}").json()
    assert status["state"] == "UNKNOWN_REQUIRES_RECOVERY"
    assert status["attempts"] == 1

    # The next check, with the provider answering again, finishes it: charged once.
    make_due(db, operation_id)
    worker = spawn.worker(once=True, **ONE_CHECK)
    assert worker.wait_exit(timeout=60) == 0, worker.log()
    completion, charge = assert_completed_once(db, faults, operation_id)
    assert completion["trigger"] == "complete"
    replay = post_payment(client, body, key=key)
    assert replay.status_code == 201, replay.text
    assert replay.json()["provider_charge_id"] == charge["charge_id"]


def test_a_refused_resend_past_the_attempts_limit_flags_the_operation(
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    """The refused resend is the check that reaches the limit: flagged for a person, still
    unknown, no outcome guessed."""
    key, body = new_key(), payment_body()
    faults.add("timeout_before_commit", account_id=body["account_id"], delay_s=4)
    faults.add("unavailable", account_id=body["account_id"])
    accepted = post_payment(client, body, key=key)
    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    make_due(db, operation_id)

    worker = spawn.worker(once=True, **ONE_CHECK, PAYMENTS_MAX_ATTEMPTS="1")
    assert worker.wait_exit(timeout=60) == 0, worker.log()

    row = operation(db, operation_id)
    assert (row["state"], row["attempts"], row["needs_attention"]) == (
        "UNKNOWN_REQUIRES_RECOVERY",
        1,
        True,
    )
    assert faults.charges(account_id=body["account_id"]) == []
    # Leave nothing due for another test's worker: finish it here.
    make_due(db, operation_id)
    worker = spawn.worker(once=True, **ONE_CHECK)
    assert worker.wait_exit(timeout=60) == 0, worker.log()
    assert_completed_once(db, faults, operation_id)
