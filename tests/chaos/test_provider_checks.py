"""The two-provider chaos checks: each finds the violation it exists for, on made-up rows.

The world: payments routed `primary` then `secondary`. One (`k1`) was declined
`processor_declined` by the primary under attempt 0's key, failed over, and was charged at
the secondary under attempt 1's key; one (`k2`) was charged at the primary. Both ledgers
agree with the rows, so the checks find nothing; each test then breaks one promise.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from chaos.checks import Snapshot, check_all
from chaos.providers import check_failover_share, failover_share, provider_report

ROUTE = ["primary", "secondary"]


def _charge(
    provider: str, key: str, charge_id: str, status: str = "succeeded", code: str | None = None
) -> dict[str, Any]:
    return {
        "provider": provider,
        "charge_id": charge_id,
        "idempotency_key": key,
        "amount_minor": 1234,
        "status": status,
        "decline_code": code,
        "created_at": "2026-11-26T10:00:00.000000Z",
    }


def _payment(key: str, attempt: int, charge_id: str | None, status: str = "SUCCEEDED") -> Any:
    op_id, pay_id = uuid.uuid4(), uuid.uuid4()
    operation = {
        "id": op_id,
        "idempotency_key": key,
        "state": "COMPLETED" if status != "FAILED" else "FAILED",
        "needs_attention": False,
        "payment_id": pay_id,
        "response_status": 201,
    }
    payment = {
        "id": pay_id,
        "operation_id": op_id,
        "provider_key": f"payment-{pay_id}",
        "status": status,
        "amount_minor": 1234,
        "provider_charge_id": charge_id,
        "route": list(ROUTE),
        "attempt": attempt,
    }
    return operation, payment


def _world() -> tuple[list[dict[str, Any]], Snapshot]:
    op1, pay1 = _payment("k1", 1, "ch_s1")
    op2, pay2 = _payment("k2", 0, "ch_p2")
    key1, key2 = pay1["provider_key"], pay2["provider_key"]
    ledger = [
        _charge("primary", key1, "ch_p1", "declined", "processor_declined"),
        _charge("secondary", f"{key1}:1", "ch_s1"),
        _charge("primary", key2, "ch_p2"),
    ]
    history = [
        {
            "key": key,
            "role": "original",
            "status": 201,
            "amount": "12.34",
            "code": None,
            "body": json.dumps(
                {
                    "payment_id": str(pay["id"]),
                    "amount": "12.34",
                    "provider_charge_id": pay["provider_charge_id"],
                }
            ),
        }
        for key, pay in (("k1", pay1), ("k2", pay2))
    ]
    snapshot = Snapshot(
        operations=[op1, op2], payments=[pay1, pay2], ledger=ledger, providers=tuple(ROUTE)
    )
    return history, snapshot


def _found(history: list[dict[str, Any]], snapshot: Snapshot) -> set[tuple[str, str]]:
    return {(v.check, v.key) for v in check_all(history, snapshot)}


def test_a_sound_failover_has_no_violation() -> None:
    history, snapshot = _world()
    assert check_all(history, snapshot) == []


def test_a_payment_charged_at_both_providers_is_found() -> None:
    history, snapshot = _world()
    # The primary approved attempt 0 after all, and the secondary charged attempt 1.
    snapshot.ledger[0].update(status="succeeded", decline_code=None)
    found = check_all(history, snapshot)
    charged = [v for v in found if v.check == "charged_once"]
    assert [v.key for v in charged] == ["k1"]
    assert "charged 2 times at 2 providers" in charged[0].detail
    assert ("failover_charged_nothing", "k1") in {(v.check, v.key) for v in found}


def test_a_payment_charged_twice_at_one_provider_is_found() -> None:
    history, snapshot = _world()
    # Attempt 1's key reached the primary too, and it charged it.
    key1 = snapshot.payments[0]["provider_key"]
    snapshot.ledger.append(_charge("primary", f"{key1}:1", "ch_p9"))
    found = _found(history, snapshot)
    assert ("charged_once", "k1") in found
    assert ("attempt_at_its_provider", "k1") in found


def test_a_payment_recorded_at_the_wrong_provider_is_found() -> None:
    history, snapshot = _world()
    # The payment says attempt 1 (secondary) but records the primary's charge.
    snapshot.ledger[0].update(status="succeeded", decline_code=None)
    del snapshot.ledger[1]
    snapshot.payments[0]["provider_charge_id"] = "ch_p1"
    history[0]["body"] = history[0]["body"].replace("ch_s1", "ch_p1")
    found = check_all(history, snapshot)
    outcome = [v for v in found if v.check == "outcome_at_route_attempt"]
    assert [v.key for v in outcome] == ["k1"]
    assert "secondary holds nothing under attempt 1" in outcome[0].detail
    assert "the charge it records is ch_p1 (succeeded) at primary, attempt 0" in outcome[0].detail


def test_a_payment_final_without_its_attempts_outcome_is_found() -> None:
    history, snapshot = _world()
    snapshot.payments[1]["status"] = "DECLINED"  # the primary approved it
    assert ("outcome_at_route_attempt", "k2") in _found(history, snapshot)
    history, snapshot = _world()
    snapshot.payments[1]["status"] = "PENDING"  # COMPLETED operation, payment not final
    assert ("outcome_at_route_attempt", "k2") in _found(history, snapshot)


def test_a_failover_from_a_card_decline_is_found() -> None:
    history, snapshot = _world()
    snapshot.ledger[0]["decline_code"] = "insufficient_funds"
    assert _found(history, snapshot) == {("failover_charged_nothing", "k1")}


def test_a_charge_under_no_payment_or_two_payments_for_a_key_are_found() -> None:
    history, snapshot = _world()
    snapshot.ledger.append(_charge("secondary", "payment-stranger:1", "ch_x"))
    assert ("one_charge_per_key", "payment-stranger:1") in _found(history, snapshot)
    history, snapshot = _world()
    _op, pay = _payment("k2", 0, "ch_p3")
    pay["operation_id"] = snapshot.payments[1]["operation_id"]
    snapshot.payments.append(pay)
    snapshot.ledger.append(_charge("primary", pay["provider_key"], "ch_p3"))
    assert ("one_charge_per_key", "k2") in _found(history, snapshot)


def _share_world(completed: int, stuck: int) -> dict[str, Any]:
    """`completed` payments failed over and final at the secondary, `stuck` failed over and
    never final; and one card decline at the primary (not eligible)."""
    operations, payments, ledger, failovers = [], [], [], []
    for n in range(completed + stuck):
        op, pay = _payment(f"f{n}", 1, f"ch_s{n}")
        if n >= completed:
            op["state"] = "PROVIDER_REQUEST_SENT"
        operations.append(op)
        payments.append(pay)
        ledger.append(_charge("secondary", f"{pay['provider_key']}:1", f"ch_s{n}"))
        failovers.append({"operation_id": str(op["id"]), "at": 1.0, "cause": "not_processed"})
    op, pay = _payment("card", 0, "ch_c", status="DECLINED")
    operations.append(op)
    payments.append(pay)
    ledger.append(_charge("primary", pay["provider_key"], "ch_c", "declined", "card_declined"))
    return {
        "failovers": failovers,
        "operations": operations,
        "payments": payments,
        "ledger": ledger,
        "retry_elsewhere": frozenset({"processor_declined"}),
    }


def test_a_failover_share_below_95_percent_is_found() -> None:
    share = failover_share(**_share_world(completed=18, stuck=2))
    assert (share.eligible, share.completed, share.share) == (20, 18, 0.9)
    violations = check_failover_share(share)
    assert [(v.check, v.key) for v in violations] == [("failover_completed", "run")]
    assert "18 of 20" in violations[0].detail
    assert "90.0%" in violations[0].detail


def test_a_failover_share_of_95_percent_passes() -> None:
    share = failover_share(**_share_world(completed=19, stuck=1))
    assert share.share == 0.95
    assert share.outcomes == {"secondary SUCCEEDED": 19}
    assert check_failover_share(share) == []


def test_a_retryable_decline_that_never_failed_over_counts_against_the_share() -> None:
    world = _share_world(completed=19, stuck=0)
    op, pay = _payment("kept", 0, "ch_k", status="DECLINED")
    world["operations"].append(op)
    world["payments"].append(pay)
    world["ledger"].append(
        _charge("primary", pay["provider_key"], "ch_k", "declined", "processor_declined")
    )
    share = failover_share(**world)
    assert (share.failed_over, share.declined_not_moved, share.completed) == (19, 1, 19)
    assert check_failover_share(share) == []  # 19 of 20: 95 %
    world["failovers"].pop()
    assert check_failover_share(failover_share(**world)) != []  # 18 of 20


def test_the_report_counts_calls_and_faults_per_provider() -> None:
    _history, snapshot = _world()
    mix = {
        "share_target": 0.3,
        "faulted": 3,
        "stored_after": 2,
        "faulted_by_kind": {"unavailable": 2, "decline": 1},
    }
    failovers = [{"operation_id": "x", "at": 5.0, "actor": "api", "cause": "declined"}]
    share = failover_share(
        failovers, snapshot.operations, snapshot.payments, snapshot.ledger, frozenset()
    )
    section = provider_report(ROUTE, snapshot.ledger, [], snapshot.payments, failovers, mix, share)
    primary, secondary = section["per_provider"]["primary"], section["per_provider"]["secondary"]
    assert primary["charges"] == 2
    assert primary["charge_statuses"] == {"declined": 1, "succeeded": 1}
    # 3 faulted calls, and 2 charges stored of which 1 by a decline rule: 4 calls at least.
    assert (primary["faulted_calls"], primary["charge_calls_at_least"]) == (3, 4)
    assert primary["faulted_share"] == 0.75
    assert primary["payments_final_here"] == {"SUCCEEDED": 1}
    assert secondary["charges"] == 1
    assert secondary["payments_final_here"] == {"SUCCEEDED": 1}
    assert section["failovers_by_cause"] == {"declined": 1}
