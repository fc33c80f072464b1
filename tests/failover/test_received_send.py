"""A recovery's send of a `RECEIVED` operation is not an attempt's only send: refused, it
stays unknown at its provider and never fails over (docs/protocol.md, failover; the only sends
are the claim's own call, a client's retry of `FAILED_RETRYABLE` and the first send after a
failover). `RECEIVED` rows are what an older release left between its claim's two commits;
recovery sends them with the trigger `send`.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.operations import operation, payment_for, transitions


def test_a_refused_send_of_a_received_operation_stays_unknown_at_its_provider(
    client: httpx.Client,
    faults: FaultInjector,
    second_faults: FaultInjector,
    two_providers: dict[str, str],
    spawn: Spawner,
    db: psycopg.Connection[DictRow],
) -> None:
    # A payment the primary refused at once (nothing charged, attempt 0), made into a row
    # an older release left: RECEIVED, its lease run out, on a route with a second provider.
    body = payment_body()
    faults.add("unavailable", account_id=body["account_id"])
    refused = post_payment(client, body, key=new_key())
    assert refused.status_code == 503, refused.text
    operation_id = refused.json()["operation_id"]
    db.execute(
        "UPDATE payments SET route = '{primary,secondary}' WHERE id = %s",
        (refused.json()["payment_id"],),
    )
    db.execute(
        "UPDATE operations SET state = 'RECEIVED', lease_owner = 'api:gone',"
        " lease_expires_at = now(), next_check_at = now() WHERE id = %s",
        (operation_id,),
    )

    # Recovery finds nothing at the primary and sends; the primary refuses that send too.
    faults.add("unavailable", account_id=body["account_id"])
    worker = spawn.worker(once=True, **FAST_WORKER, **two_providers)
    assert worker.wait_exit(timeout=60) == 0, worker.log()[-3000:]

    row = operation(db, operation_id)
    assert row["state"] == "UNKNOWN_REQUIRES_RECOVERY", row
    assert payment_for(db, operation_id)["attempt"] == 0
    assert "failover" not in [t["trigger"] for t in transitions(db, operation_id)]
    assert second_faults.charges(account_id=body["account_id"]) == []
