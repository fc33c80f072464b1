"""The chaos refund checks: each finds the violation it exists for, and accepts a sound run.

A made-up payment of 10.00 with two refunds (6.00 made, 5.00 refused), its database rows and
the provider's ledgers; each test breaks exactly one promise.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from chaos.refund_checks import RefundSnapshot, check_refunds


def _world() -> tuple[list[dict[str, Any]], RefundSnapshot]:
    pay_id, op_a, op_b, ref_a = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    provider_key = f"refund-{ref_a}"
    body = {"refund_id": str(ref_a), "provider_refund_id": "re_1", "status": "SUCCEEDED"}
    history = [
        {"key": "r-a", "status": 202, "code": None, "body": "{}", "amount": "6.00"},
        {"key": "r-a", "status": 201, "code": None, "body": json.dumps(body), "amount": "6.00"},
        {"key": "r-a", "status": 201, "code": None, "body": json.dumps(body), "amount": "6.00"},
        {
            "key": "r-b",
            "status": 422,
            "code": "REFUND_EXCEEDS_PAYMENT",
            "body": "{}",
            "amount": "5.00",
        },
    ]
    snapshot = RefundSnapshot(
        refunds=[
            {
                "id": ref_a,
                "operation_id": op_a,
                "provider_key": provider_key,
                "status": "SUCCEEDED",
                "amount_minor": 600,
                "provider_refund_id": "re_1",
            }
        ],
        operations=[
            {"id": op_a, "idempotency_key": "r-a", "state": "COMPLETED"},
            {"id": op_b, "idempotency_key": "r-unused", "state": "COMPLETED"},
        ],
        payments=[
            {
                "id": pay_id,
                "status": "PARTIALLY_REFUNDED",
                "amount_minor": 1000,
                "amount_refunded_minor": 600,
                "provider_charge_id": "ch_1",
            }
        ],
        charges=[{"charge_id": "ch_1", "amount_minor": 1000}],
        provider_refunds=[
            {
                "refund_id": "re_1",
                "charge_id": "ch_1",
                "idempotency_key": provider_key,
                "amount_minor": 600,
            }
        ],
    )
    return history, snapshot


def test_a_sound_run_has_no_violation() -> None:
    history, snapshot = _world()
    assert check_refunds(history, snapshot) == []


def _checks(history: list[dict[str, Any]], snapshot: RefundSnapshot) -> set[str]:
    return {v.check for v in check_refunds(history, snapshot)}


def test_a_refund_made_twice_is_found() -> None:
    history, snapshot = _world()
    snapshot.provider_refunds.append({**snapshot.provider_refunds[0], "refund_id": "re_2"})
    assert "refund_matches_ledger" in _checks(history, snapshot)
    snapshot.provider_refunds.append(
        {**snapshot.provider_refunds[0], "idempotency_key": "refund-stranger"}
    )
    assert "refund_once_per_key" in _checks(history, snapshot)


@pytest.mark.parametrize(
    ("field", "value"),
    [("amount_refunded_minor", 500), ("status", "REFUNDED"), ("amount_refunded_minor", 1100)],
)
def test_a_payment_that_disagrees_with_the_provider_is_found(field: str, value: Any) -> None:
    history, snapshot = _world()
    snapshot.payments[0][field] = value
    assert _checks(history, snapshot) == {"refunds_within_payment"}


def test_a_charge_refunded_beyond_its_amount_is_found() -> None:
    history, snapshot = _world()
    snapshot.provider_refunds.append(
        {"refund_id": "re_9", "charge_id": "ch_1", "idempotency_key": "x", "amount_minor": 500}
    )
    assert "refunds_within_payment" in _checks(history, snapshot)


def test_a_failed_refund_the_provider_made_is_found() -> None:
    history, snapshot = _world()
    snapshot.refunds[0]["status"] = "FAILED"
    assert "refund_matches_ledger" in _checks(history, snapshot)


def test_answers_outside_the_contract_and_unfinished_keys_are_found() -> None:
    history, snapshot = _world()
    history.append({"key": "r-c", "status": 500, "code": None, "body": "oops", "amount": "1.00"})
    assert _checks(history, snapshot) == {"refund_expected_statuses", "refunds_finished"}


def test_a_201_the_provider_does_not_know_or_differing_replays_are_found() -> None:
    history, snapshot = _world()
    history[2] = {**history[2], "body": json.dumps({"refund_id": "x", "provider_refund_id": "y"})}
    assert _checks(history, snapshot) == {"refund_replays_identical"}
    history, snapshot = _world()
    snapshot.provider_refunds[0]["amount_minor"] = 601
    assert "refund_success_matches" in _checks(history, snapshot)
