"""A provider's "not processed" that was wrong, with real processes: the payment failed over
from an attempt that was in fact charged, and recovery finds that charge.

The primary commits attempt 0's charge and answers the documented 503 "not processed"
(`unavailable_after_commit`), so the API fails over; the secondary never processes attempt 1
(`timeout_before_commit`), so its outcome is unknown and the worker recovers the payment. The
worker looks up every attempt: it finds attempt 0's charge at the primary and records it. A
lookup of the latest attempt alone would find nothing at the secondary and send attempt 1
again there, charging the payment at both providers.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.operations import make_due, payment_for, transitions, wait_for_state


def test_recovery_finds_the_charge_of_an_attempt_failed_over_from_and_charges_nothing_else(
    routed: httpx.Client,
    spawn: Spawner,
    two_providers: dict[str, str],
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("unavailable_after_commit", account_id=body["account_id"])
    second_faults.add("timeout_before_commit", account_id=body["account_id"], delay_s=3)

    accepted = post_payment(routed, body, key=key)

    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    payment = payment_for(db, operation_id)
    first, second = str(payment["provider_key"]), f"{payment['provider_key']}:1"
    assert payment["attempt"] == 1, "the wrong 'not processed' did not fail the payment over"
    charged = faults.charges(idempotency_key=first)
    assert [c["status"] for c in charged] == ["succeeded"]
    assert second_faults.charges(idempotency_key=second) == []

    make_due(db, operation_id)
    spawn.worker(once=False, **two_providers, **FAST_WORKER)
    wait_for_state(db, operation_id, "COMPLETED", "FAILED")

    # Exactly one charge for the payment, across both providers' ledgers: attempt 0's.
    mine = [
        c
        for ledger in (faults, second_faults)
        for c in ledger.charges()
        if str(c["idempotency_key"]).startswith(first)
    ]
    assert [(c["idempotency_key"], c["status"]) for c in mine] == [(first, "succeeded")]
    done = payment_for(db, operation_id)
    assert (done["status"], done["attempt"]) == ("SUCCEEDED", 0)
    assert done["provider_charge_id"] == charged[0]["charge_id"]
    history = transitions(db, operation_id)
    assert [t["trigger"] for t in history] == ["claim", "send", "failover", "lose", "complete"]
    assert history[-1]["reason"] == "found by provider lookup: succeeded at primary (attempt 0)"
    assert str(history[-1]["actor"]).startswith("worker:")
