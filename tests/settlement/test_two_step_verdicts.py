"""A capture's verdicts, row by row of the table in `app/settlement/matching.py`.

`test_captures.py` reaches them through real books; here each row is pinned on its own, with
the words an operator reads, and how both sides of a capture are shown.
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
CAPTURE = RecordType.CAPTURE
PAYMENT_ID = uuid.UUID("00000000-0000-4000-8000-000000000011")
CAPTURE_ID = uuid.UUID("00000000-0000-4000-8000-000000000012")
KEY = f"payment-{PAYMENT_ID}"
CAPTURE_KEY = f"capture-{CAPTURE_ID}"

# A capture of 4.00, on both sides.
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


def test_a_capture_shows_its_own_id_its_payment_and_its_charge() -> None:
    ours = OUR_CAPTURE.snapshot()
    assert (ours["id"], ours["payment_id"]) == (str(CAPTURE_ID), str(PAYMENT_ID))
    assert "amount_refunded_minor" not in ours
    theirs = THEIR_CAPTURE.snapshot()
    assert (theirs["id"], theirs["charge_id"]) == ("cp_1", "ch_1")
