"""A `FAILED_RETRYABLE` payment whose charge the provider made after all, settled.

The service records `FAILED_RETRYABLE` only when the provider answered its only send "not
processed", and waits for the client's retry: no worker claims such an operation. When that
answer was wrong (the fake provider's `unavailable_after_commit`: the charge is committed,
the answer is the documented 503), the day's run must queue the charge as an `orphan`
("we recorded it as certainly not sent", docs/settlement.md), not hand it to the reconciler,
which would never take it up.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.settlement import at, by_key, changes, edit, own_day, settle, summary
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.operations import operation, payment_for

Db = psycopg.Connection[DictRow]


def test_a_retryable_payment_the_provider_charged_is_an_orphan_not_a_recovery(
    client: httpx.Client,
    db: Db,
    faults: FaultInjector,
    ledger: httpx.Client,
    base_env: dict[str, str],
) -> None:
    day = own_day()
    body = payment_body()
    faults.add("unavailable_after_commit", account_id=body["account_id"])
    refused = post_payment(client, body, key=new_key())
    assert refused.status_code == 503, refused.text
    operation_id = refused.json()["operation_id"]
    assert operation(db, operation_id)["state"] == "FAILED_RETRYABLE"
    payment = payment_for(db, operation_id)
    key = str(payment["provider_key"])
    (charge,) = faults.charges(idempotency_key=key)
    assert charge["status"] == "succeeded"
    db.execute("UPDATE payments SET created_at = %s WHERE id = %s", (at(day), payment["id"]))
    edit(ledger, "charges", str(charge["charge_id"]), created_at=at(day).isoformat())
    due = operation(db, operation_id)["next_check_at"]

    run = summary(settle(base_env, day))

    assert (run["found"], run["opened"], run["recovering"]) == ({"orphan": 1}, 1, 0)
    queued = by_key(db, key)
    assert set(queued) == {"orphan"}
    orphan = queued["orphan"]
    assert orphan["state"] == "open"
    assert orphan["detail"] == (
        "the provider made this charge; we recorded it as certainly not sent"
    )
    assert (orphan["payment_id"], orphan["operation_id"]) == (
        payment["id"],
        payment["operation_id"],
    )
    assert orphan["ours"]["operation_state"] == "FAILED_RETRYABLE"
    assert orphan["theirs"]["status"] == "succeeded"
    # Nothing handed to the reconciler: the operation waits for its client as it did.
    after = operation(db, operation_id)
    assert (after["state"], after["next_check_at"]) == ("FAILED_RETRYABLE", due)

    again = summary(settle(base_env, day))
    assert (again["found"], again["opened"], again["recovering"]) == ({"orphan": 1}, 0, 0)
    assert [c["to_state"] for c in changes(db, orphan["id"])] == ["open"]
