"""Recovery's lookup walks every attempt of a failed-over payment, with real processes, and
takes from the walk only what it should (`app/payments/attempts.py`'s `look_up`):

- an attempt with nothing at its provider does not end the walk: the primary refused the
  only send (nothing there), the secondary charged attempt 1 and the answer was lost; the
  worker's lookup goes on past attempt 0 and finds the charge at the secondary, without
  sending anything again;
- a decline is only the current attempt's to report: the primary declined attempt 0 with a
  code retryable elsewhere, attempt 1 timed out before the secondary processed it; the
  worker finds the old decline, nothing under attempt 1, and sends attempt 1 again, which
  the secondary charges; the payment is not declined on attempt 0's word.
"""

from __future__ import annotations

import dataclasses

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.payments.attempts import ChargeAt
from app.provider.client import Charge
from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.operations import make_due, payment_for, transitions, wait_for_state


def test_a_charge_found_under_an_attempt_is_a_fixed_fact() -> None:
    found = ChargeAt(Charge("ch_1", "succeeded", None), attempt=1, provider="secondary")
    declined = ChargeAt(Charge("ch_2", "declined", "processor_declined"), 0, "primary")
    assert (found.succeeded, declined.succeeded) == (True, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.attempt = 0  # type: ignore[misc]


def _recover(
    spawn: Spawner, two_providers: dict[str, str], db: psycopg.Connection[DictRow], op: str
) -> None:
    make_due(db, op)
    spawn.worker(once=False, **two_providers, **FAST_WORKER)
    wait_for_state(db, op, "COMPLETED", "FAILED")


def test_nothing_under_attempt_0_does_not_stop_the_lookup_of_attempt_1(
    routed: httpx.Client,
    spawn: Spawner,
    two_providers: dict[str, str],
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("unavailable", account_id=body["account_id"])
    second_faults.add("drop_after_commit", account_id=body["account_id"])

    accepted = post_payment(routed, body, key=key)

    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    assert payment_for(db, operation_id)["attempt"] == 1
    _recover(spawn, two_providers, db, operation_id)
    done = payment_for(db, operation_id)
    second = f"{done['provider_key']}:1"
    charged = second_faults.charges(idempotency_key=second)
    assert [c["status"] for c in charged] == ["succeeded"]
    assert (done["status"], done["attempt"]) == ("SUCCEEDED", 1)
    history = transitions(db, operation_id)
    assert [t["trigger"] for t in history] == ["claim", "send", "failover", "lose", "complete"]
    assert history[-1]["reason"] == "found by provider lookup: succeeded at secondary (attempt 1)"


def test_an_earlier_attempts_decline_is_not_the_payments_outcome(
    routed: httpx.Client,
    spawn: Spawner,
    two_providers: dict[str, str],
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("decline", account_id=body["account_id"], decline_code="processor_declined")
    second_faults.add("timeout_before_commit", account_id=body["account_id"], delay_s=3)

    accepted = post_payment(routed, body, key=key)

    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    _recover(spawn, two_providers, db, operation_id)
    done = payment_for(db, operation_id)
    first, second = str(done["provider_key"]), f"{done['provider_key']}:1"
    assert [c["status"] for c in faults.charges(idempotency_key=first)] == ["declined"]
    charged = second_faults.charges(idempotency_key=second)
    assert [c["status"] for c in charged] == ["succeeded"]
    assert (done["status"], done["attempt"]) == ("SUCCEEDED", 1)
    assert done["provider_charge_id"] == charged[0]["charge_id"]
    triggers = [t["trigger"] for t in transitions(db, operation_id)]
    assert triggers.count("failover") == 1
    assert triggers[-2:] == ["resend", "complete"]
