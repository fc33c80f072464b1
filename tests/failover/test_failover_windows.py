"""The failover's own window, with real processes: the move to the next attempt committed,
the new attempt not sent yet, and the API killed or paused there.

Recovery reads the attempt the row names, looks up both attempts (nothing at either) and
sends attempt 1, under its own key, to the secondary: charged once, there. A paused API that
wakes up after the worker finished sends attempt 1 again: the secondary deduplicates on the
key, and the stale owner's write is fenced out.
"""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_in_background
from tests.support.factories.tenants import TenantHandle
from tests.support.readers.operations import (
    operation,
    operation_by_key,
    payment_for,
    transitions,
    wait_lease_expired,
)

SHORT_LEASE = {"PAYMENTS_LEASE_S": "3", "PAYMENTS_PROVIDER_TIMEOUT_S": "1"}
# An API held in the window, its lease run out, a worker: about 20 s each on two cores,
# `python3 tasks.py test-long`.
pytestmark = pytest.mark.long


@pytest.mark.parametrize("stop", ["kill", "pause"])
def test_an_api_stopped_between_the_failover_and_its_send_is_charged_once_at_the_secondary(
    stop: str,
    background: ThreadPoolExecutor,
    spawn: Spawner,
    two_providers: dict[str, str],
    tenant: TenantHandle,
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    # Long enough for the test to stop it there; a paused API sleeps out the rest once it
    # is resumed, after the worker finished.
    api = spawn.api(**two_providers, **SHORT_LEASE, PAYMENTS_FAILPOINTS="after_failover=15")
    key, body = new_key(), payment_body()
    faults.add("unavailable", account_id=body["account_id"])
    answer = post_in_background(background, api, tenant, key, body)

    def failed_over() -> bool:
        row = operation_by_key(db, tenant, key)
        return row is not None and payment_for(db, row["id"])["attempt"] == 1

    wait_until(failed_over, timeout=30, message="the payment moved to attempt 1")
    operation_id = str(operation_by_key(db, tenant, key)["id"])  # type: ignore[index]
    if stop == "kill":
        api.kill()
        with pytest.raises(httpx.TransportError):
            answer.result(timeout=30)
    else:
        api.signal(signal.SIGSTOP)
    payment = payment_for(db, operation_id)
    first, second = payment["provider_key"], f"{payment['provider_key']}:1"
    # Inside the window: attempt 1 written, nothing sent under its key anywhere.
    assert operation(db, operation_id)["state"] == "PROVIDER_REQUEST_SENT"
    assert second_faults.charges(idempotency_key=second) == []

    wait_lease_expired(db, operation_id)
    worker = spawn.worker(once=True, **two_providers)
    assert worker.wait_exit(timeout=60) == 0, worker.log()

    assert operation(db, operation_id)["state"] == "COMPLETED"
    if stop == "pause":
        api.signal(signal.SIGCONT)
        late = answer.result(timeout=60)
        # The stale owner's send was deduplicated and its write fenced out: it answers with
        # the worker's stored outcome.
        assert late.status_code == 201, late.text
    charged = second_faults.charges(idempotency_key=second)
    assert [c["status"] for c in charged] == ["succeeded"]
    assert faults.charges(idempotency_key=first) == []
    assert faults.charges(idempotency_key=second) == []
    done = payment_for(db, operation_id)
    assert (done["status"], done["attempt"]) == ("SUCCEEDED", 1)
    assert done["provider_charge_id"] == charged[0]["charge_id"]
    history = transitions(db, operation_id)
    assert [t["trigger"] for t in history] == ["claim", "send", "failover", "resend", "complete"]
    assert str(history[-1]["actor"]).startswith("worker:")
