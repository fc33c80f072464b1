"""The broker chaos run's checks: each finds what it exists for, and accepts a sound run.

A made-up run of four commands: a payment published three times, its refund, a capture
refused (nothing stored), and a message that is no command, dead-lettered twice. Each test
breaks one promise.
"""

from __future__ import annotations

from typing import Any

from chaos.broker_checks import Effect, Operation, Sent, check_broker_run, reasons_by_key

SENT = [
    Sent("create_payment", "k-pay", 3),
    Sent("create_refund", "k-refund", 1),
    Sent("capture_payment", "k-capture", 2),
    Sent("bad:malformed_json", "k-bad", 2),
]
OPERATIONS = [
    Operation("create_payment", "k-pay", "COMPLETED", False, "payment-1"),
    Operation("create_refund", "k-refund", "FAILED", False, "refund-1"),
]
LEDGER = [Effect("charges", "payment-1"), Effect("refunds", "refund-1")]
DEAD = {"k-bad": ["malformed_json", "malformed_json"]}
REFUSED = {"k-capture": "CAPTURE_EXCEEDS_CAPTURABLE"}


def _check(**changes: Any) -> Any:
    inputs: dict[str, Any] = {
        "sent": SENT,
        "operations": OPERATIONS,
        "ledger": LEDGER,
        "dead_letters": DEAD,
        "refusals": REFUSED,
    }
    inputs.update(changes)
    return check_broker_run(**inputs)


def test_a_sound_run_is_accounted_for_with_no_violation() -> None:
    result = _check()
    assert result.violations == []
    assert (result.final, result.effects) == (2, 2)
    assert dict(result.dead_lettered) == {"malformed_json": 1}
    assert dict(result.refused) == {"CAPTURE_EXCEEDS_CAPTURABLE": 1}


def test_a_second_charge_under_one_derived_key_is_a_double_effect() -> None:
    result = _check(ledger=[*LEDGER, Effect("charges", "payment-1")])
    assert [(v.check, v.key) for v in result.violations] == [("double_effect", "payment-1")]


def test_an_effect_no_operation_explains_is_a_double_effect() -> None:
    # A second payment made for one command would leave a charge under a key of its own.
    result = _check(ledger=[*LEDGER, Effect("charges", "payment-2")])
    assert [(v.check, v.key) for v in result.violations] == [("double_effect", "payment-2")]


def test_a_command_with_no_operation_no_dead_letter_and_no_refusal_is_lost() -> None:
    result = _check(operations=OPERATIONS[1:], ledger=LEDGER[1:])
    assert [(v.check, v.key) for v in result.violations] == [("lost", "k-pay")]


def test_a_command_with_some_copies_dead_lettered_and_nothing_stored_is_lost() -> None:
    result = _check(dead_letters={"k-bad": ["malformed_json"]})
    assert [(v.check, v.key) for v in result.violations] == [("lost", "k-bad")]


def test_an_operation_left_in_flight_is_unsettled() -> None:
    in_flight = Operation("create_payment", "k-pay", "IN_PROGRESS", False, "payment-1")
    result = _check(operations=[in_flight, OPERATIONS[1]])
    assert [(v.check, v.key) for v in result.violations] == [("unsettled", "k-pay")]
    flagged = Operation("create_payment", "k-pay", "IN_PROGRESS", True, "payment-1")
    assert _check(operations=[flagged, OPERATIONS[1]]).violations == []


def test_dead_letters_are_grouped_by_key() -> None:
    letters = [("k-1", "unauthenticated"), (None, "delivery_limit"), ("k-1", "delivery_limit")]
    assert reasons_by_key(letters) == {
        "k-1": ["unauthenticated", "delivery_limit"],
        "<no key>": ["delivery_limit"],
    }
