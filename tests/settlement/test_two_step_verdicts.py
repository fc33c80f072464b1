"""Two-step payments' verdicts, row by row of the table in `app/settlement/matching.py`: an
authorization (a manual payment's charge) and a capture.

`test_captures.py` reaches them through real books; here each row is pinned on its own, with
the words an operator reads, and how both sides of an authorization and a capture are shown.
"""

from __future__ import annotations

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
from app.settlement.strays import judge_stray, parse_key

AT = datetime(2026, 11, 28, 9, 30, tzinfo=UTC)
CHARGE = RecordType.CHARGE
CAPTURE = RecordType.CAPTURE
PAYMENT_ID = uuid.UUID("00000000-0000-4000-8000-000000000011")
CAPTURE_ID = uuid.UUID("00000000-0000-4000-8000-000000000012")
KEY = f"payment-{PAYMENT_ID}"
CAPTURE_KEY = f"capture-{CAPTURE_ID}"

# A manual payment of 12.50, 4.00 of it captured, and the provider's authorization of it.
HOLD = OurRecord(
    record_type=CHARGE,
    provider_key=KEY,
    tenant_id=uuid.UUID("00000000-0000-4000-8000-000000000013"),
    operation_id=uuid.UUID("00000000-0000-4000-8000-000000000014"),
    operation_state=State.COMPLETED.value,
    payment_id=PAYMENT_ID,
    refund_id=None,
    status="PARTIALLY_CAPTURED",
    amount_minor=1250,
    currency="EUR",
    amount_refunded_minor=0,
    provider_id="ch_1",
    created_at=AT,
    manual=True,
    amount_captured_minor=400,
)
AUTHORIZATION = TheirRecord(
    record_type=CHARGE,
    provider_id="ch_1",
    provider_key=KEY,
    status="authorized",
    amount_minor=1250,
    currency="EUR",
    created_at=AT,
    amount_refunded_minor=0,
    capture="manual",
    amount_captured_minor=400,
    voided=False,
)
# Its capture of 4.00, on both sides.
OUR_CAPTURE = OurRecord(
    record_type=CAPTURE,
    provider_key=CAPTURE_KEY,
    tenant_id=uuid.UUID("00000000-0000-4000-8000-000000000013"),
    operation_id=uuid.UUID("00000000-0000-4000-8000-000000000015"),
    operation_state=State.COMPLETED.value,
    payment_id=PAYMENT_ID,
    refund_id=None,
    status="SUCCEEDED",
    amount_minor=400,
    currency="EUR",
    amount_refunded_minor=None,
    provider_id="cp_1",
    created_at=AT,
    capture_id=CAPTURE_ID,
)
THEIR_CAPTURE = TheirRecord(
    record_type=CAPTURE,
    provider_id="cp_1",
    provider_key=CAPTURE_KEY,
    status="succeeded",
    amount_minor=400,
    currency="EUR",
    created_at=AT,
    charge_id="ch_1",
)


def one(verdict: Verdict) -> Difference:
    assert len(verdict.differences) == 1, verdict
    assert not verdict.recover
    return verdict.differences[0]


@pytest.mark.parametrize(
    ("status", "captured", "refunded"),
    [
        ("AUTHORIZED", 0, 0),
        ("PARTIALLY_CAPTURED", 400, 0),
        ("CAPTURED", 1250, 0),
        ("CAPTURED", 400, 0),  # the rest released by a void, or a hold that lapsed
        ("VOIDED", 0, 0),
        ("EXPIRED", 0, 0),
        ("PARTIALLY_REFUNDED", 400, 100),
        ("REFUNDED", 400, 400),
    ],
)
@pytest.mark.parametrize("settled", [True, False], ids=["settled", "unsettled"])
def test_an_authorization_both_books_agree_on_is_agreed_and_awaits_no_line(
    status: str, captured: int, refunded: int, settled: bool
) -> None:
    ours = replace(HOLD, status=status, amount_captured_minor=captured)
    ours = replace(ours, amount_refunded_minor=refunded)
    theirs = replace(AUTHORIZATION, amount_captured_minor=captured)
    theirs = replace(theirs, amount_refunded_minor=refunded, voided=status == "VOIDED")
    assert judge(CHARGE, ours, theirs, settled=settled) == Verdict(agreed=True)


def test_an_authorization_the_provider_lacks_is_missing() -> None:
    assert one(judge(CHARGE, HOLD, None, settled=False)) == Difference(
        ItemKind.MISSING, "we recorded this authorization; the provider has none"
    )


@pytest.mark.parametrize("status", ["declined", "succeeded", "partially_refunded"])
def test_an_authorization_the_provider_holds_as_something_else_is_a_status_mismatch(
    status: str,
) -> None:
    found = one(judge(CHARGE, HOLD, replace(AUTHORIZATION, status=status), settled=True))
    assert found == Difference(
        ItemKind.STATUS_MISMATCH,
        f"we recorded this charge as authorized (PARTIALLY_CAPTURED), the provider as {status}",
    )


def test_an_authorization_of_another_amount_or_currency_is_one_item_each() -> None:
    theirs = replace(AUTHORIZATION, amount_minor=1300, currency="USD")
    assert judge(CHARGE, HOLD, theirs, settled=True) == Verdict(
        (
            Difference(ItemKind.AMOUNT_MISMATCH, "we recorded 1250 EUR, the provider 1300 USD"),
            Difference(ItemKind.CURRENCY_MISMATCH, "we recorded EUR, the provider USD"),
        )
    )


def test_a_different_captured_amount_is_a_status_mismatch_naming_both_books() -> None:
    theirs = replace(AUTHORIZATION, amount_captured_minor=700)
    assert one(judge(CHARGE, HOLD, theirs, settled=True)) == Difference(
        ItemKind.STATUS_MISMATCH, "we recorded 400 captured, the provider 700"
    )


def test_captured_and_refunded_amounts_both_differing_are_one_item() -> None:
    theirs = replace(AUTHORIZATION, amount_captured_minor=700, amount_refunded_minor=100)
    assert one(judge(CHARGE, HOLD, theirs, settled=True)) == Difference(
        ItemKind.STATUS_MISMATCH,
        "we recorded 400 captured, the provider 700; we recorded 0 refunded, the provider 100",
    )


def test_captured_amounts_are_not_compared_while_a_capture_or_void_is_in_flight() -> None:
    ours = replace(HOLD, modification_in_flight=True)
    theirs = replace(AUTHORIZATION, amount_captured_minor=1250)
    assert judge(CHARGE, ours, theirs, settled=True) == Verdict(agreed=True)
    # What was refunded still is.
    refunded = replace(theirs, amount_refunded_minor=100)
    assert one(judge(CHARGE, ours, refunded, settled=True)).kind is ItemKind.STATUS_MISMATCH


def test_a_captured_amount_a_lookup_did_not_give_is_not_compared() -> None:
    theirs = replace(AUTHORIZATION, amount_captured_minor=None, amount_refunded_minor=None)
    assert judge(CHARGE, HOLD, theirs, settled=False) == Verdict(agreed=True)


def test_a_one_step_payment_the_provider_holds_as_an_authorization_is_a_status_mismatch() -> None:
    ours = replace(HOLD, status="SUCCEEDED", manual=False, amount_captured_minor=None)
    assert one(judge(CHARGE, ours, AUTHORIZATION, settled=True)) == Difference(
        ItemKind.STATUS_MISMATCH, "we recorded this charge as succeeded, the provider as authorized"
    )


def test_an_authorization_we_have_no_record_of_is_an_orphan() -> None:
    assert one(judge(CHARGE, None, AUTHORIZATION, settled=False)) == Difference(
        ItemKind.ORPHAN, "the provider authorized this charge; we have no record"
    )
    retryable = replace(HOLD, operation_state=State.FAILED_RETRYABLE.value, status="FAILED")
    assert one(judge(CHARGE, retryable, AUTHORIZATION, settled=False)) == Difference(
        ItemKind.ORPHAN,
        "the provider authorized this charge; we recorded it as certainly not sent",
    )


def test_an_authorization_we_declined_or_failed_differs_as_a_charge_would() -> None:
    declined = replace(HOLD, status="DECLINED", amount_captured_minor=0)
    assert one(judge(CHARGE, declined, AUTHORIZATION, settled=False)) == Difference(
        ItemKind.STATUS_MISMATCH, "we recorded this charge as declined, the provider as authorized"
    )
    failed = replace(HOLD, operation_state=State.FAILED.value, status="FAILED")
    assert one(judge(CHARGE, failed, AUTHORIZATION, settled=False)) == Difference(
        ItemKind.ORPHAN, "the provider authorized this charge; we recorded it as not made"
    )
    declined_there = replace(AUTHORIZATION, status="declined")
    assert judge(CHARGE, declined, declined_there, settled=False) == NOTHING


def test_an_authorization_still_in_flight_is_the_reconcilers() -> None:
    pending = replace(HOLD, operation_state=State.UNKNOWN_REQUIRES_RECOVERY.value, status="PENDING")
    assert judge(CHARGE, pending, AUTHORIZATION, settled=False) == Verdict(recover=True)


def test_a_capture_both_books_agree_on_is_expected_until_its_line_settles_it() -> None:
    assert judge(CAPTURE, OUR_CAPTURE, THEIR_CAPTURE, settled=True) == Verdict(agreed=True)
    assert judge(CAPTURE, OUR_CAPTURE, THEIR_CAPTURE, settled=False) == Verdict(
        (Difference(ItemKind.EXPECTED, "agreed; the provider has not settled it yet"),),
        agreed=True,
    )


def test_a_capture_one_book_lacks_is_missing_or_an_orphan() -> None:
    assert one(judge(CAPTURE, OUR_CAPTURE, None, settled=False)) == Difference(
        ItemKind.MISSING, "we recorded this capture; the provider has none"
    )
    assert one(judge(CAPTURE, None, THEIR_CAPTURE, settled=True)) == Difference(
        ItemKind.ORPHAN, "the provider made this capture; we have no record"
    )
    failed = replace(OUR_CAPTURE, operation_state=State.FAILED.value, status="FAILED")
    assert one(judge(CAPTURE, failed, THEIR_CAPTURE, settled=True)) == Difference(
        ItemKind.ORPHAN, "the provider made this capture; we recorded it as not made"
    )
    assert judge(CAPTURE, failed, None, settled=False) == NOTHING


def test_a_capture_of_another_amount_is_an_amount_mismatch() -> None:
    theirs = replace(THEIR_CAPTURE, amount_minor=450)
    assert one(judge(CAPTURE, OUR_CAPTURE, theirs, settled=True)) == Difference(
        ItemKind.AMOUNT_MISMATCH, "we recorded 400 EUR, the provider 450 EUR"
    )


def test_a_capture_in_flight_is_the_reconcilers() -> None:
    pending = replace(
        OUR_CAPTURE, operation_state=State.UNKNOWN_REQUIRES_RECOVERY.value, status="PENDING"
    )
    assert judge(CAPTURE, pending, THEIR_CAPTURE, settled=True) == Verdict(recover=True)
    assert judge(CAPTURE, pending, None, settled=True) == NOTHING


@pytest.mark.parametrize(
    ("key", "ours"),
    [
        (CAPTURE_KEY, True),
        (f"void-{CAPTURE_ID}", False),
        (f"refund-{CAPTURE_ID}", False),
        (KEY, False),
        ("capture-not-a-uuid", False),
        (f"{CAPTURE_KEY}:1", False),
    ],
    ids=["capture", "void", "refund", "payment", "not-a-uuid", "attempt"],
)
def test_a_captures_key_is_ours_alone_with_no_attempts(key: str, ours: bool) -> None:
    assert is_our_key(CAPTURE, key) is ours
    assert parse_key(CAPTURE, key) == ((key, 0) if ours else None)


def test_a_capture_at_a_provider_it_was_never_sent_to_is_an_orphan_there() -> None:
    verdict = judge_stray(CAPTURE, OUR_CAPTURE, 0, THEIR_CAPTURE, "secondary")
    assert one(verdict) == Difference(
        ItemKind.ORPHAN,
        "the provider made this capture under its key, sent only to primary, never here "
        "(money taken); we sent the capture to primary",
    )


def test_a_second_authorization_under_an_attempt_moved_on_from_is_an_orphan() -> None:
    routed = replace(HOLD, route=("primary", "secondary"), provider="secondary", attempt=1)
    stray = replace(AUTHORIZATION, provider_key=KEY)
    assert one(judge_stray(CHARGE, routed, 0, stray, "primary")) == Difference(
        ItemKind.ORPHAN,
        "the provider made this charge under attempt 0's key; the payment is "
        "PARTIALLY_CAPTURED at attempt 1, at secondary: a second charge",
    )
    elsewhere = judge_stray(CHARGE, routed, 0, stray, "tertiary")
    assert "(money held)" in one(elsewhere).detail


def test_both_sides_of_an_authorization_show_what_was_captured() -> None:
    assert {
        name: value
        for name, value in HOLD.snapshot().items()
        if name in ("capture", "amount_captured_minor")
    } == {"capture": "manual", "amount_captured_minor": 400}
    theirs = AUTHORIZATION.snapshot()
    assert (theirs["capture"], theirs["amount_captured_minor"], theirs["voided"]) == (
        "manual",
        400,
        False,
    )
    one_step = replace(AUTHORIZATION, status="succeeded", capture="automatic").snapshot()
    assert "capture" not in one_step
    assert "amount_captured_minor" not in replace(HOLD, manual=False).snapshot()


def test_a_capture_shows_its_own_id_its_payment_and_its_charge() -> None:
    ours = OUR_CAPTURE.snapshot()
    assert (ours["id"], ours["payment_id"]) == (str(CAPTURE_ID), str(PAYMENT_ID))
    assert "amount_refunded_minor" not in ours
    theirs = THEIR_CAPTURE.snapshot()
    assert (theirs["id"], theirs["charge_id"]) == ("cp_1", "ch_1")
