"""A payment whose route names a provider this worker does not configure (removed or renamed
since): recovery cannot look it up there, so each check is counted, on the backoff, until
the operation needs attention; the worker says so in one line naming the provider, never
a traceback per check, and never guesses the outcome.
"""

from __future__ import annotations

import json

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.operations import make_due, operation, payment_for


def test_a_route_through_an_unconfigured_provider_is_counted_and_flagged_in_plain_words(
    routed: httpx.Client,
    faults: FaultInjector,
    second_faults: FaultInjector,
    spawn: Spawner,
    db: psycopg.Connection[DictRow],
) -> None:
    # Failed over to the secondary, whose answer is lost: unknown, at attempt 1.
    body = payment_body()
    faults.add("unavailable", account_id=body["account_id"])
    second_faults.add("drop_after_commit", account_id=body["account_id"])
    accepted = post_payment(routed, body, key=new_key())
    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    assert payment_for(db, operation_id)["attempt"] == 1

    # A worker that knows only the primary (the session's provider, as configured alone).
    worker = spawn.worker(once=False, **FAST_WORKER, PAYMENTS_MAX_ATTEMPTS="2")
    make_due(db, operation_id)
    wait_until(
        lambda: bool(operation(db, operation_id)["needs_attention"]),
        timeout=60,
        message="the operation to need attention",
    )

    row = operation(db, operation_id)
    assert row["state"] == "UNKNOWN_REQUIRES_RECOVERY"
    assert row["attempts"] >= 2
    assert payment_for(db, operation_id)["status"] == "PENDING"
    entries = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
    said = [entry for entry in entries if operation_id in entry.get("msg", "")]
    assert said, worker.log()
    assert all(entry["level"] == "error" for entry in said), said
    assert all("no provider named 'secondary' is configured" in entry["msg"] for entry in said)
    assert not any("exc" in entry for entry in said), said
