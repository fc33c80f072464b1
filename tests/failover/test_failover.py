"""Failover across two providers, with real processes: a payment moves to the next provider
only when its attempt provably charged nothing, and is never charged at both.

- the primary refuses the only send (`unavailable`, documented "not processed"): charged at
  the secondary under the attempt's own key, nothing at the primary;
- the primary declines with a code the routing marks retryable elsewhere: the decline stays
  under attempt 0's key at the primary, the charge is the secondary's; a card decline
  (`insufficient_funds`) is final and never tried elsewhere;
- the primary charges and the answer is lost, or it times out: never a failover; the worker
  finds the charge at the primary (or sends attempt 0 again there);
- a decline retryable elsewhere whose answer was lost is found by the worker's lookup, which
  fails over: the secondary charges;
- both refuse: 503 with the payment at attempt 1; the client's retry charges the secondary;
- a refund of a payment charged at the secondary goes to the secondary;
- the client's own retry of a lost decline fails over inline, as the worker would;
- a primary nobody listens at fails over (connection refused), and once its breaker is
  open, payments fail over without being sent to it at all;
- failovers and attempts are counted by provider and cause.
"""

from __future__ import annotations

import json

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process, free_port
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.operations import (
    failover_records,
    make_due,
    operation,
    payment_for,
    transitions,
    wait_for_state,
)

Row = dict[str, object]


def _keys(payment: Row) -> tuple[str, str]:
    """The keys of the payment's attempts 0 and 1."""
    key = str(payment["provider_key"])
    return key, f"{key}:1"


def _charged_only_at_secondary(
    db: psycopg.Connection[DictRow],
    operation_id: str,
    faults: FaultInjector,
    second_faults: FaultInjector,
) -> Row:
    payment = payment_for(db, operation_id)
    first, second = _keys(payment)
    assert payment["route"] == ["primary", "secondary"]
    assert payment["attempt"] == 1
    assert [c["status"] for c in faults.charges(idempotency_key=first)] in ([], ["declined"])
    assert faults.charges(idempotency_key=second) == [], "attempt 1's key went to the primary"
    charged = second_faults.charges(idempotency_key=second)
    assert [c["status"] for c in charged] == ["succeeded"]
    assert second_faults.charges(idempotency_key=first) == [], "attempt 0's key left its provider"
    assert payment["status"] == "SUCCEEDED"
    assert payment["provider_charge_id"] == charged[0]["charge_id"]
    return payment


def _recovered_by_a_worker(
    spawn: Spawner, two_providers: dict[str, str], db: psycopg.Connection[DictRow], op: str
) -> None:
    """A worker routed to both providers takes the operation now and settles it."""
    make_due(db, op)
    spawn.worker(once=False, **two_providers, **FAST_WORKER)
    wait_for_state(db, op, "COMPLETED", "FAILED")


def test_a_refused_only_send_fails_over_to_the_secondary(
    routed: httpx.Client,
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("unavailable", account_id=body["account_id"])

    created = post_payment(routed, body, key=key)

    assert created.status_code == 201, created.text
    operation_id = created.json()["operation_id"]
    _charged_only_at_secondary(db, operation_id, faults, second_faults)
    history = transitions(db, operation_id)
    assert [(t["trigger"], t["to_state"]) for t in history] == [
        ("claim", "RECEIVED"),
        ("send", "PROVIDER_REQUEST_SENT"),
        ("failover", "PROVIDER_REQUEST_SENT"),
        ("complete", "COMPLETED"),
    ]
    assert history[1]["reason"] == "calling the provider: primary (attempt 0)"
    assert "primary (attempt 0) did not process the only send" in str(history[2]["reason"])
    assert "attempt 1 at secondary" in str(history[2]["reason"])
    assert history[3]["reason"] == "provider answered: succeeded at secondary (attempt 1)"
    assert failover_records(db, operation_id) == [
        {
            "transition_id": history[2]["id"],
            "from_attempt": 0,
            "from_provider": "primary",
            "to_provider": "secondary",
            "cause": "not_processed",
            "detail": "the provider answered 503 (not processed)",
        }
    ]
    replay = post_payment(routed, body, key=key)
    assert replay.status_code == 201
    assert replay.content == created.content


def test_a_decline_retryable_elsewhere_fails_over_and_stays_a_decline_at_the_primary(
    routed: httpx.Client,
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("decline", account_id=body["account_id"], decline_code="processor_declined")

    created = post_payment(routed, body, key=key)

    assert created.status_code == 201, created.text
    operation_id = created.json()["operation_id"]
    payment = _charged_only_at_secondary(db, operation_id, faults, second_faults)
    first, _ = _keys(payment)
    held = faults.charges(idempotency_key=first)
    assert [(c["status"], c["decline_code"]) for c in held] == [("declined", "processor_declined")]
    failover = [t for t in transitions(db, operation_id) if t["trigger"] == "failover"]
    assert "declined processor_declined, retryable elsewhere" in str(failover[0]["reason"])
    (record,) = failover_records(db, operation_id)
    assert record["transition_id"] == failover[0]["id"]
    assert (record["cause"], record["detail"]) == ("declined", "processor_declined")


def test_a_card_decline_is_final_and_never_tried_elsewhere(
    routed: httpx.Client,
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    body = payment_body(account_id="acc_decline_insufficient_funds")

    declined = post_payment(routed, body, key=new_key())

    assert declined.status_code == 402, declined.text
    assert declined.json()["code"] == "insufficient_funds"
    payment = payment_for(db, declined.json()["operation_id"])
    first, second = _keys(payment)
    assert payment["attempt"] == 0
    assert [c["status"] for c in faults.charges(idempotency_key=first)] == ["declined"]
    assert second_faults.charges(idempotency_key=second) == []
    assert "failover" not in {t["trigger"] for t in transitions(db, payment["operation_id"])}
    assert failover_records(db, payment["operation_id"]) == []


def test_a_lost_answer_never_fails_over_and_is_found_at_the_primary(
    routed: httpx.Client,
    spawn: Spawner,
    two_providers: dict[str, str],
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    # Charged at the primary, the answer lost: unknown, never "not sent".
    faults.add("drop_after_commit", account_id=body["account_id"])

    accepted = post_payment(routed, body, key=key)

    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    payment = payment_for(db, operation_id)
    first, second = _keys(payment)
    assert payment["attempt"] == 0
    assert second_faults.charges(idempotency_key=second) == []
    _recovered_by_a_worker(spawn, two_providers, db, operation_id)
    charged = faults.charges(idempotency_key=first)
    assert [c["status"] for c in charged] == ["succeeded"]
    assert [c for c in second_faults.charges() if str(c["idempotency_key"]).startswith(first)] == []
    done = payment_for(db, operation_id)
    assert (done["status"], done["attempt"]) == ("SUCCEEDED", 0)
    assert done["provider_charge_id"] == charged[0]["charge_id"]
    assert "failover" not in {t["trigger"] for t in transitions(db, operation_id)}


def test_a_timeout_never_fails_over_and_attempt_0_is_sent_again_at_the_primary(
    routed: httpx.Client,
    spawn: Spawner,
    two_providers: dict[str, str],
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    # Not processed, but the caller cannot know: the deadline fired after the request left.
    # Then the worker's resend is refused: a refused *resend* never fails over either.
    faults.add("timeout_before_commit", account_id=body["account_id"], delay_s=3)
    faults.add("unavailable", account_id=body["account_id"])

    accepted = post_payment(routed, body, key=key)

    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    _recovered_by_a_worker(spawn, two_providers, db, operation_id)
    payment = payment_for(db, operation_id)
    first, second = _keys(payment)
    assert (payment["status"], payment["attempt"]) == ("SUCCEEDED", 0)
    assert [c["status"] for c in faults.charges(idempotency_key=first)] == ["succeeded"]
    assert second_faults.charges(idempotency_key=second) == []
    history = [(t["trigger"], t["to_state"]) for t in transitions(db, operation_id)]
    assert ("failover", "PROVIDER_REQUEST_SENT") not in history
    assert history.count(("resend", "PROVIDER_REQUEST_SENT")) >= 2


def test_a_lost_decline_retryable_elsewhere_is_failed_over_by_the_worker(
    routed: httpx.Client,
    spawn: Spawner,
    two_providers: dict[str, str],
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("decline", account_id=body["account_id"], decline_code="issuer_unavailable")
    faults.add("drop_after_commit", account_id=body["account_id"])

    accepted = post_payment(routed, body, key=key)

    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    _recovered_by_a_worker(spawn, two_providers, db, operation_id)
    _charged_only_at_secondary(db, operation_id, faults, second_faults)
    history = transitions(db, operation_id)
    failover = [t for t in history if t["trigger"] == "failover"]
    assert len(failover) == 1
    assert failover[0]["from_state"] == "UNKNOWN_REQUIRES_RECOVERY"
    assert str(failover[0]["actor"]).startswith("worker:")
    (record,) = failover_records(db, operation_id)
    assert (record["transition_id"], record["detail"]) == (failover[0]["id"], "issuer_unavailable")
    replay = post_payment(routed, body, key=key)
    assert replay.status_code == 201
    assert replay.json()["status"] == "SUCCEEDED"


def test_both_refusing_is_a_503_and_the_retry_charges_the_secondary(
    routed: httpx.Client,
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("unavailable", account_id=body["account_id"])
    second_faults.add("unavailable", account_id=body["account_id"])

    refused = post_payment(routed, body, key=key)

    assert refused.status_code == 503, refused.text
    assert refused.json()["code"] == "PROVIDER_UNAVAILABLE"
    operation_id = refused.json()["operation_id"]
    assert operation(db, operation_id)["state"] == "FAILED_RETRYABLE"
    assert payment_for(db, operation_id)["attempt"] == 1
    retried = post_payment(routed, body, key=key)
    assert retried.status_code == 201, retried.text
    _charged_only_at_secondary(db, operation_id, faults, second_faults)
    triggers = [t["trigger"] for t in transitions(db, operation_id)]
    assert triggers == ["claim", "send", "failover", "defer", "retry", "complete"]


def test_a_refund_goes_to_the_provider_that_holds_the_charge(
    routed: httpx.Client,
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    body = payment_body()
    faults.add("unavailable", account_id=body["account_id"])
    created = post_payment(routed, body, key=new_key())
    assert created.status_code == 201, created.text
    payment_id = created.json()["payment_id"]

    refunded = routed.post(
        f"/payments/{payment_id}/refunds",
        json={"amount": "4.00"},
        headers={"Idempotency-Key": new_key()},
    )

    assert refunded.status_code == 201, refunded.text
    charge_id = created.json()["provider_charge_id"]
    assert [r["amount_minor"] for r in second_faults.refunds(charge_id=charge_id)] == [400]
    assert faults.refunds(charge_id=charge_id) == []
    row = db.execute("SELECT provider FROM refunds WHERE payment_id = %s", (payment_id,)).fetchone()
    assert row is not None
    assert row["provider"] == "secondary"


def _sample(text: str, name: str, **labels: str) -> float:
    """One sample's value in a `/metrics` page (0 when absent)."""
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        metric, _, rest = series.partition("{")
        if metric == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
            return float(value)
    return 0.0


def test_failovers_and_attempts_are_counted_by_provider_and_cause(
    routed_api: Process,
    routed: httpx.Client,
    faults: FaultInjector,
) -> None:
    assert routed_api.admin_url is not None
    before = httpx.get(f"{routed_api.admin_url}/metrics", timeout=10).text
    refused, declined = payment_body(), payment_body()
    faults.add("unavailable", account_id=refused["account_id"])
    faults.add("decline", account_id=declined["account_id"], decline_code="processor_declined")

    for body in (refused, declined):
        assert post_payment(routed, body, key=new_key()).status_code == 201

    after = httpx.get(f"{routed_api.admin_url}/metrics", timeout=10).text

    def grew(name: str, **labels: str) -> float:
        return _sample(after, name, **labels) - _sample(before, name, **labels)

    moved = {"from_provider": "primary", "to_provider": "secondary"}
    assert grew("payments_provider_failovers_total", **moved, cause="not_processed") == 1
    assert grew("payments_provider_failovers_total", **moved, cause="declined") == 1
    assert grew("payments_payment_attempts_total", provider="primary") == 2
    assert grew("payments_payment_attempts_total", provider="secondary") == 2
    charged = {"operation": "charge", "outcome": "succeeded", "provider": "secondary"}
    assert grew("payments_provider_calls_total", **charged) == 2
    assert _sample(after, "payments_provider_breaker_state", provider="secondary") == 0


def test_a_lost_decline_is_failed_over_inline_by_the_clients_retry(
    routed: httpx.Client,
    faults: FaultInjector,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("decline", account_id=body["account_id"], decline_code="try_again_later")
    faults.add("drop_after_commit", account_id=body["account_id"])
    accepted = post_payment(routed, body, key=key)
    assert accepted.status_code == 202, accepted.text

    retried = post_payment(routed, body, key=key)

    assert retried.status_code == 201, retried.text
    operation_id = accepted.json()["operation_id"]
    _charged_only_at_secondary(db, operation_id, faults, second_faults)
    failover = [t for t in transitions(db, operation_id) if t["trigger"] == "failover"]
    assert [t["from_state"] for t in failover] == ["UNKNOWN_REQUIRES_RECOVERY"]
    assert str(failover[0]["actor"]).startswith("api:")


def test_a_provider_that_cannot_be_reached_fails_over_and_then_its_breaker_does(
    spawn: Spawner,
    secondary: Process,
    tenant: TenantHandle,
    second_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    assert secondary.url is not None
    nobody = f"http://127.0.0.1:{free_port()}"
    providers = [
        {"name": "primary", "url": nobody, "breaker_failures": 1, "breaker_cooldown_s": 300},
        {"name": "secondary", "url": secondary.url},
    ]
    api = spawn.api(PAYMENTS_PROVIDERS=json.dumps(providers))
    causes, recorded = [], []
    with api_client(api, tenant) as client:
        for _ in range(2):
            created = post_payment(client, payment_body(), key=new_key())
            assert created.status_code == 201, created.text
            operation_id = created.json()["operation_id"]
            payment = payment_for(db, operation_id)
            assert second_faults.charges(idempotency_key=f"{payment['provider_key']}:1") != []
            (failover,) = [t for t in transitions(db, operation_id) if t["trigger"] == "failover"]
            causes.append(str(failover["reason"]))
            (record,) = failover_records(db, operation_id)
            assert record["transition_id"] == failover["id"]
            recorded.append((record["cause"], record["detail"]))
    # Connection refused on the first: not processed. The breaker opened on it, so the second
    # was never sent to the primary at all.
    assert "did not process the only send (could not reach the provider" in causes[0]
    assert "held back by its circuit breaker" in causes[1]
    assert recorded[0][0] == "not_processed"
    assert str(recorded[0][1]).startswith("could not reach the provider")
    assert recorded[1] == ("circuit_open", None)
    assert api.admin_url is not None
    page = httpx.get(f"{api.admin_url}/metrics", timeout=10).text
    assert _sample(page, "payments_provider_breaker_state", provider="primary") == 2
    assert _sample(page, "payments_provider_breaker_state", provider="secondary") == 0
