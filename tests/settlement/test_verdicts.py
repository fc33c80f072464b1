"""One record's verdict, row by row of the table in `app/settlement/matching.py`.

The settlement runs (`test_run.py`, `test_providers.py`) reach `judge` through the books and
the queue; here each row of its table is pinned on its own, with the words an operator reads
(a verdict whose kind is right but whose detail names the wrong side misleads as much), and
the helpers it rests on: which keys are ours, where an attempt's key was sent, and how a
record is shown.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from app.operations.states import State
from app.settlement.books import TheirRecord
from app.settlement.matching import (
    NOTHING,
    Difference,
    OurRecord,
    Verdict,
    is_our_key,
    judge,
)
from app.settlement.rows import ItemKind, RecordType

AT = datetime(2026, 11, 27, 9, 30, tzinfo=UTC)
CHARGE = RecordType.CHARGE
REFUND = RecordType.REFUND
PAYMENT_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")
REFUND_ID = uuid.UUID("00000000-0000-4000-8000-000000000002")
KEY = f"payment-{PAYMENT_ID}"

OURS = OurRecord(
    record_type=CHARGE,
    provider_key=KEY,
    tenant_id=uuid.UUID("00000000-0000-4000-8000-000000000003"),
    operation_id=uuid.UUID("00000000-0000-4000-8000-000000000004"),
    operation_state=State.COMPLETED.value,
    payment_id=PAYMENT_ID,
    refund_id=None,
    status="SUCCEEDED",
    amount_minor=1250,
    currency="EUR",
    amount_refunded_minor=0,
    provider_id="ch_1",
    created_at=AT,
)
THEIRS = TheirRecord(
    record_type=CHARGE,
    provider_id="ch_1",
    provider_key=KEY,
    status="succeeded",
    amount_minor=1250,
    currency="EUR",
    created_at=AT,
    amount_refunded_minor=0,
)


def one(verdict: Verdict) -> Difference:
    assert len(verdict.differences) == 1, verdict
    assert not verdict.recover
    return verdict.differences[0]


@pytest.mark.parametrize("status", ["succeeded", "partially_refunded", "refunded"])
def test_a_charge_we_have_no_record_of_is_an_orphan(status: str) -> None:
    found = one(judge(CHARGE, None, replace(THEIRS, status=status), settled=True))
    assert found == Difference(ItemKind.ORPHAN, "the provider made this charge; we have no record")


@pytest.mark.parametrize("theirs", [None, replace(THEIRS, status="declined")])
def test_no_record_of_ours_and_no_money_moved_is_nothing(theirs: TheirRecord | None) -> None:
    assert judge(CHARGE, None, theirs, settled=True) == NOTHING
    assert Verdict((), recover=False, agreed=False, failover_decline=False) == NOTHING


def test_a_refund_is_named_a_refund_in_the_words() -> None:
    found = one(judge(REFUND, None, replace(THEIRS, record_type=REFUND), settled=True))
    assert found.detail == "the provider made this refund; we have no record"


def test_a_charge_we_recorded_as_certainly_not_sent_is_an_orphan() -> None:
    ours = replace(OURS, operation_state=State.FAILED_RETRYABLE.value, status="FAILED")
    found = one(judge(CHARGE, ours, THEIRS, settled=True))
    assert found == Difference(
        ItemKind.ORPHAN, "the provider made this charge; we recorded it as certainly not sent"
    )
    assert judge(CHARGE, ours, None, settled=True) == NOTHING
    assert judge(CHARGE, ours, replace(THEIRS, status="declined"), settled=True) == NOTHING


@pytest.mark.parametrize(
    "state", [State.RECEIVED, State.PROVIDER_REQUEST_SENT, State.UNKNOWN_REQUIRES_RECOVERY]
)
def test_an_operation_not_final_goes_to_the_reconciler_only_when_they_hold_a_record(
    state: State,
) -> None:
    ours = replace(OURS, operation_state=state.value, status="PROCESSING")
    assert judge(CHARGE, ours, THEIRS, settled=True) == Verdict(recover=True)
    assert judge(CHARGE, ours, replace(THEIRS, status="declined"), settled=True) == Verdict(
        recover=True
    )
    assert judge(CHARGE, ours, None, settled=True) == Verdict(recover=False)


@pytest.mark.parametrize("status", ["SUCCEEDED", "PARTIALLY_REFUNDED", "REFUNDED"])
def test_a_charge_that_took_effect_and_that_they_lack_is_missing(status: str) -> None:
    found = one(judge(CHARGE, replace(OURS, status=status), None, settled=True))
    assert found == Difference(ItemKind.MISSING, "we recorded this charge; the provider has none")


def test_a_charge_that_took_effect_and_that_they_declined_is_a_status_mismatch() -> None:
    found = one(judge(CHARGE, OURS, replace(THEIRS, status="declined"), settled=True))
    assert found == Difference(
        ItemKind.STATUS_MISMATCH,
        "we recorded this charge as succeeded, the provider as declined",
    )


def test_agreed_and_settled_is_no_item_and_agreed() -> None:
    assert judge(CHARGE, OURS, THEIRS, settled=True) == Verdict(agreed=True)


def test_agreed_but_not_settled_yet_is_expected_and_agreed() -> None:
    verdict = judge(CHARGE, OURS, THEIRS, settled=False)
    assert verdict == Verdict(
        (Difference(ItemKind.EXPECTED, "agreed; the provider has not settled it yet"),),
        agreed=True,
    )


def test_a_different_amount_is_an_amount_mismatch_naming_both_sides() -> None:
    verdict = judge(CHARGE, OURS, replace(THEIRS, amount_minor=1300), settled=False)
    assert verdict == Verdict(
        (Difference(ItemKind.AMOUNT_MISMATCH, "we recorded 1250 EUR, the provider 1300 EUR"),)
    )


def test_an_amount_the_lookup_gave_without_a_currency_is_shown_bare() -> None:
    theirs = replace(THEIRS, amount_minor=99, currency=None)
    found = one(judge(CHARGE, OURS, theirs, settled=True))
    assert found.detail == "we recorded 1250 EUR, the provider 99"


def test_a_different_currency_is_a_currency_mismatch_and_none_is_not_compared() -> None:
    found = one(judge(CHARGE, OURS, replace(THEIRS, currency="USD"), settled=True))
    assert found == Difference(ItemKind.CURRENCY_MISMATCH, "we recorded EUR, the provider USD")
    # Either way round.
    found = one(judge(CHARGE, replace(OURS, currency="USD"), THEIRS, settled=True))
    assert found == Difference(ItemKind.CURRENCY_MISMATCH, "we recorded USD, the provider EUR")
    assert judge(CHARGE, OURS, replace(THEIRS, currency=None), settled=True).agreed


def test_amounts_and_currencies_are_compared_by_value() -> None:
    # Equal amounts read separately (from the database, from the provider's JSON) are equal
    # numbers, not the same object.
    theirs = replace(
        THEIRS,
        amount_minor=int("1250"),
        currency="".join(["E", "UR"]),
        amount_refunded_minor=int("0") + 300,
    )
    ours = replace(OURS, amount_refunded_minor=int("300"))
    assert judge(CHARGE, ours, theirs, settled=True) == Verdict(agreed=True)


def test_a_different_refunded_amount_is_a_status_mismatch() -> None:
    theirs = replace(THEIRS, status="partially_refunded", amount_refunded_minor=250)
    found = one(judge(CHARGE, OURS, theirs, settled=True))
    assert found == Difference(ItemKind.STATUS_MISMATCH, "we recorded 0 refunded, the provider 250")


def test_more_refunded_on_our_side_is_a_status_mismatch_too() -> None:
    found = one(judge(CHARGE, replace(OURS, amount_refunded_minor=250), THEIRS, settled=True))
    assert found == Difference(ItemKind.STATUS_MISMATCH, "we recorded 250 refunded, the provider 0")


def test_verdicts_and_records_cannot_be_changed() -> None:
    verdict = judge(CHARGE, OURS, None, settled=True)
    for frozen, field in (
        (OURS, "status"),
        (verdict, "recover"),
        (verdict.differences[0], "detail"),
    ):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(frozen, field, None)


@pytest.mark.parametrize(("ours", "theirs"), [(None, 250), (250, None)])
def test_a_refunded_amount_one_side_does_not_give_is_not_compared(
    ours: int | None, theirs: int | None
) -> None:
    verdict = judge(
        CHARGE,
        replace(OURS, amount_refunded_minor=ours),
        replace(THEIRS, amount_refunded_minor=theirs),
        settled=True,
    )
    assert verdict == Verdict(agreed=True)


def test_every_difference_is_one_item() -> None:
    theirs = replace(THEIRS, amount_minor=1, currency="USD", amount_refunded_minor=1)
    kinds = [d.kind for d in judge(CHARGE, OURS, theirs, settled=True).differences]
    assert kinds == [
        ItemKind.AMOUNT_MISMATCH,
        ItemKind.CURRENCY_MISMATCH,
        ItemKind.STATUS_MISMATCH,
    ]


def test_a_charge_we_declined_and_they_made_is_a_status_mismatch() -> None:
    # The status as read from a row: an equal string, not the module's constant itself.
    ours = replace(OURS, status="".join(["DECL", "INED"]))
    found = one(judge(CHARGE, ours, THEIRS, settled=True))
    assert found == Difference(
        ItemKind.STATUS_MISMATCH, "we recorded this charge as declined, the provider as succeeded"
    )


def test_a_charge_we_failed_and_they_made_is_an_orphan() -> None:
    ours = replace(OURS, status="FAILED", operation_state=State.FAILED.value)
    found = one(judge(CHARGE, ours, THEIRS, settled=True))
    assert found == Difference(
        ItemKind.ORPHAN, "the provider made this charge; we recorded it as not made"
    )


@pytest.mark.parametrize("status", ["DECLINED", "FAILED"])
@pytest.mark.parametrize("theirs", [None, replace(THEIRS, status="declined")])
def test_nothing_moved_on_either_side_is_nothing(status: str, theirs: TheirRecord | None) -> None:
    assert judge(CHARGE, replace(OURS, status=status), theirs, settled=True) == NOTHING


@pytest.mark.parametrize(
    ("record_type", "key", "ours"),
    [
        (CHARGE, KEY, True),
        (REFUND, f"refund-{REFUND_ID}", True),
        (CHARGE, f"refund-{REFUND_ID}", False),
        (REFUND, KEY, False),
        (CHARGE, "payment-not-a-uuid", False),
        (CHARGE, f"xpayment-{PAYMENT_ID}", False),
        (CHARGE, "payment-", False),
    ],
)
def test_our_keys_are_the_derived_ones_of_their_kind(
    record_type: RecordType, key: str, ours: bool
) -> None:
    assert is_our_key(record_type, key) is ours


def test_a_payment_is_held_under_its_attempts_key_and_sent_only_where_its_route_says() -> None:
    single = OURS
    assert single.key == KEY
    assert single.sent_to(0) == "primary"
    assert single.sent_to(1) is None
    routed = replace(OURS, route=("primary", "secondary"), provider="secondary", attempt=1)
    assert routed.key == f"{KEY}:1"
    assert [routed.sent_to(n) for n in range(5)] == ["primary", "secondary", None, None, None]
    assert single.sent_to(7) is None


def test_a_charge_shows_what_was_refunded_and_a_routed_one_its_route() -> None:
    shown = OURS.snapshot()
    assert shown == {
        "id": str(PAYMENT_ID),
        "status": "SUCCEEDED",
        "amount_minor": 1250,
        "currency": "EUR",
        "created_at": AT.isoformat(),
        "operation_state": "COMPLETED",
        "provider_id": "ch_1",
        "amount_refunded_minor": 0,
    }
    routed = replace(OURS, route=("primary", "secondary"), attempt=1).snapshot()
    assert (routed["route"], routed["attempt"]) == (["primary", "secondary"], 1)


def test_a_refund_shows_its_own_id_and_no_refunded_amount() -> None:
    refund = replace(OURS, record_type=REFUND, refund_id=REFUND_ID, amount_refunded_minor=None)
    shown = refund.snapshot()
    assert shown["id"] == str(REFUND_ID)
    assert "amount_refunded_minor" not in shown
    assert "route" not in shown
