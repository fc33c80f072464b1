"""The chaos checks themselves: each one finds the violation it exists for.

A checker that never fails proves nothing, so each check is shown a small made-up history,
database and ledger that breaks exactly its promise, next to a consistent one it accepts.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from chaos.checks import Snapshot, check_all


def _charge(provider_key: str, charge_id: str, amount: int, status: str = "succeeded") -> Any:
    return {
        "charge_id": charge_id,
        "idempotency_key": provider_key,
        "amount_minor": amount,
        "status": status,
    }


def _world(
    *,
    key: str = "k1",
    state: str = "COMPLETED",
    payment_status: str = "SUCCEEDED",
    charges: int = 1,
    charge_status: str = "succeeded",
    needs_attention: bool = False,
) -> tuple[dict[str, Any], Snapshot]:
    """One payment of 12.34 for `key`, and its ledger; returns (ids, snapshot)."""
    op_id, pay_id = uuid.uuid4(), uuid.uuid4()
    provider_key = f"payment-{pay_id}"
    operation = {
        "id": op_id,
        "idempotency_key": key,
        "state": state,
        "needs_attention": needs_attention,
        "payment_id": pay_id,
        "response_status": 201,
    }
    payment = {
        "id": pay_id,
        "operation_id": op_id,
        "provider_key": provider_key,
        "status": payment_status,
        "amount_minor": 1234,
        "provider_charge_id": "ch_1" if payment_status == "SUCCEEDED" else None,
    }
    ledger = [
        _charge(provider_key if n == 0 else f"payment-{uuid.uuid4()}", f"ch_{n + 1}", 1234)
        for n in range(charges)
    ]
    for entry in ledger:
        entry["status"] = charge_status
    ids = {"payment_id": str(pay_id), "operation_id": str(op_id), "provider_key": provider_key}
    return ids, Snapshot(operations=[operation], payments=[payment], ledger=ledger)


def _record(
    ids: dict[str, Any], *, status: int | None, role: str = "original", **extra: Any
) -> Any:
    body = json.dumps(
        {
            "payment_id": ids["payment_id"],
            "status": "SUCCEEDED",
            "amount": "12.34",
            "provider_charge_id": "ch_1",
        }
    )
    record = {
        "key": "k1",
        "role": role,
        "status": status,
        "amount": "12.34",
        "body": body if status == 201 else "{}",
        "code": None,
    }
    record.update(extra)
    return record


def _checks(history: list[Any], snapshot: Snapshot) -> set[str]:
    return {violation.check for violation in check_all(history, snapshot)}


def test_a_consistent_run_has_no_violation() -> None:
    ids, snapshot = _world()
    history = [
        _record(ids, status=None, error="ReadTimeout"),
        _record(ids, status=202),
        _record(ids, status=201),
        _record(ids, status=201, role="replay"),
        _record(ids, status=422, role="mismatch", code="IDEMPOTENCY_KEY_REUSED"),
    ]
    assert check_all(history, snapshot) == []


def test_two_charges_for_one_key_are_found() -> None:
    ids, snapshot = _world()
    second = dict(snapshot.payments[0], id=uuid.uuid4(), provider_key="payment-second")
    snapshot.payments.append(second)
    snapshot.ledger.append(_charge("payment-second", "ch_2", 1234))
    assert "one_charge_per_key" in _checks([_record(ids, status=201)], snapshot)


def test_a_charge_no_payment_explains_is_found() -> None:
    ids, snapshot = _world(charges=2)
    assert "one_charge_per_key" in _checks([_record(ids, status=201)], snapshot)


def test_a_success_without_its_charge_is_found() -> None:
    ids, snapshot = _world(charges=0)
    found = _checks([_record(ids, status=201)], snapshot)
    assert {"success_matches_ledger", "ledger_matches_database"} <= found


def test_a_charge_recorded_as_failure_is_found() -> None:
    _ids, snapshot = _world(state="FAILED", payment_status="FAILED")
    assert "ledger_matches_database" in _checks([], snapshot)


def test_an_unsettled_operation_is_found_unless_flagged() -> None:
    _ids, snapshot = _world(state="UNKNOWN_REQUIRES_RECOVERY", payment_status="PENDING")
    assert "operations_settled" in _checks([], snapshot)
    _ids, flagged = _world(
        state="UNKNOWN_REQUIRES_RECOVERY", payment_status="PENDING", needs_attention=True
    )
    assert "operations_settled" not in _checks([], flagged)


def test_a_replay_that_differs_is_found() -> None:
    ids, snapshot = _world()
    other = _record(ids, status=201, role="replay")
    other["body"] = other["body"].replace("12.34", "12.35")
    assert "replays_identical" in _checks([_record(ids, status=201), other], snapshot)


def test_a_charge_behind_a_definite_failure_is_found() -> None:
    ids, snapshot = _world(state="FAILED", payment_status="FAILED")
    rejected = _record(ids, status=502, code="PROVIDER_REJECTED")
    assert "nothing_charged_on_failure" in _checks([rejected], snapshot)


def test_a_mismatch_that_is_not_refused_is_found() -> None:
    ids, snapshot = _world()
    accepted = _record(ids, status=201, role="mismatch")
    assert "mismatch_rejected" in _checks([_record(ids, status=201), accepted], snapshot)


def test_a_mismatch_answered_while_the_database_was_out_of_reach_is_no_violation() -> None:
    ids, snapshot = _world()
    unavailable = _record(ids, status=503, role="mismatch", code="SERVICE_UNAVAILABLE")
    refused = _record(ids, status=422, role="mismatch", code="IDEMPOTENCY_KEY_REUSED")
    assert "mismatch_rejected" not in _checks([_record(ids, status=201), unavailable], snapshot)
    assert "mismatch_rejected" not in _checks([_record(ids, status=201), refused], snapshot)
    breaker = _record(ids, status=503, role="mismatch", code="PROVIDER_UNAVAILABLE")
    assert "mismatch_rejected" in _checks([_record(ids, status=201), breaker], snapshot)


def test_an_answer_outside_the_contract_is_found() -> None:
    ids, snapshot = _world()
    history = [_record(ids, status=500), _record(ids, status=201)]
    assert "expected_statuses" in _checks(history, snapshot)


def test_a_key_without_a_final_answer_is_found() -> None:
    ids, snapshot = _world()
    assert "intents_finished" in _checks([_record(ids, status=202)], snapshot)


def test_an_authorization_is_a_manual_payment_held_not_a_charge_gone_missing() -> None:
    ids, snapshot = _world(payment_status="AUTHORIZED", charge_status="authorized")
    snapshot.payments[0]["provider_charge_id"] = "ch_1"
    history = [_record(ids, status=202), _record(ids, status=201)]
    assert check_all(history, snapshot) == []
    for status in ("CAPTURED", "VOIDED", "EXPIRED", "PARTIALLY_CAPTURED"):
        snapshot.payments[0]["status"] = status
        assert check_all(history, snapshot) == []
    # An authorization recorded as a one-step success, or behind a decline, is not.
    snapshot.payments[0]["status"] = "SUCCEEDED"
    assert _checks(history, snapshot) == {"ledger_matches_database", "success_matches_ledger"}
    ids, snapshot = _world(payment_status="DECLINED", charge_status="authorized")
    found = _checks([_record(ids, status=402)], snapshot)
    assert {"nothing_charged_on_failure", "ledger_matches_database"} <= found
