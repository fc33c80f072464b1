"""The catalogue's partition names, as the conversion and the calendar use them."""

from __future__ import annotations

from datetime import UTC, date, datetime

from app.partitions.layout import EVENTS, OPERATION_TRANSITIONS, by_name, day_bounds, is_partition


def test_a_days_partition_is_named_by_its_day_and_read_back() -> None:
    day = date(2026, 11, 27)
    assert EVENTS.day_partition(day) == "events_p20261127"
    assert EVENTS.day_of("events_p20261127") == day
    assert EVENTS.legacy == "events_legacy"
    assert OPERATION_TRANSITIONS.column == "operation_created_at"
    assert by_name("operation_transitions") is OPERATION_TRANSITIONS


def test_what_is_not_a_days_partition_of_the_table_has_no_day() -> None:
    for name in (
        "events_legacy",
        "events_p2026112",
        "events_p20261399",
        "events",
        "xevents_p20261127",
    ):
        assert EVENTS.day_of(name) is None, name
    # Another table's partition is not this one's.
    assert EVENTS.day_of("operation_transitions_p20261127") is None
    assert is_partition("operation_transitions_p20261127")
    assert is_partition("events_legacy")
    assert not is_partition("events")
    assert is_partition("payments_p20261127")
    assert is_partition("operations_legacy")
    assert not is_partition("operations")
    assert not is_partition("refunds_p20261127")


def test_a_day_is_a_utc_day() -> None:
    start, end = day_bounds(date(2026, 3, 29))
    assert start == datetime(2026, 3, 29, tzinfo=UTC)
    assert end == datetime(2026, 3, 30, tzinfo=UTC)
