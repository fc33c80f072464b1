"""What operators read about a failover: the words for each cause, and the admin API's fields.

`test_failover_records.py` writes a failover and reads it back from the table (a decline);
these pin the words of every cause, so that a payment's page never says "declined" of a
send that was never processed, and the JSON the admin API shows on the attempt left behind.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from app.payments.attempts import (
    CAUSES,
    CIRCUIT_OPEN,
    DECLINED,
    NOT_PROCESSED,
    FailoverCount,
    FailoverRecord,
    summary,
)

AT = datetime(2026, 11, 27, 6, 0, 0, 123456, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cause", "detail", "words"),
    [
        (DECLINED, "processor_declined", "declined processor_declined, retryable elsewhere"),
        (NOT_PROCESSED, "connection refused", "not processed (connection refused)"),
        (CIRCUIT_OPEN, None, "held back by its circuit breaker"),
        # A cause this module has no words for yet is shown as it is, on either side of the
        # known ones in alphabetical order.
        ("a_cause_added_later", "x", "a_cause_added_later"),
        ("unknown_cause", "x", "unknown_cause"),
    ],
)
def test_each_cause_has_its_own_words(cause: str, detail: str | None, words: str) -> None:
    assert summary(cause, detail) == words
    # As read from a row: an equal string, not the module's constant itself.
    assert summary("".join(cause), detail) == words


def test_the_three_causes_are_told_apart() -> None:
    assert len({summary(cause, "d") for cause in CAUSES}) == 3


def test_a_record_shows_where_the_payment_went_and_why() -> None:
    record = FailoverRecord(
        transition_id=41,
        from_attempt=1,
        from_provider="secondary",
        to_provider="tertiary",
        cause=NOT_PROCESSED,
        detail="connection refused",
        created_at=AT,
    )
    assert record.to_attempt == 2
    assert record.summary == "not processed (connection refused)"
    assert record.json() == {
        "to_provider": "tertiary",
        "to_attempt": 2,
        "cause": "not_processed",
        "detail": "connection refused",
        "transition_id": 41,
        "at": "2026-11-27T06:00:00.123456Z",
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.cause = DECLINED  # type: ignore[misc]


def test_a_count_is_a_frozen_row_of_from_to_cause_and_count() -> None:
    # As counts() builds it from each row of its GROUP BY.
    count = FailoverCount("primary", "secondary", DECLINED, 7)
    assert (count.from_provider, count.to_provider, count.cause, count.count) == (
        "primary",
        "secondary",
        "declined",
        7,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        count.count = 8  # type: ignore[misc]
