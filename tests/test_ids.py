"""The ids the service makes (UUIDv7, RFC 9562) and the window of `created_at` they tell."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.rows import DictRow

from app.ids import ID_TIME_MARGIN, created_window, id_sql, id_time, new_id, within

AT = datetime(2026, 11, 27, 21, 50, 12, 345_678, tzinfo=UTC)


def test_an_id_is_version_7_of_the_rfc_variant() -> None:
    ident = new_id(AT)
    assert ident.version == 7
    assert ident.variant == uuid.RFC_4122
    # As the RFC lays it out: the version nibble and the variant's two bits.
    assert str(ident)[14] == "7"
    assert str(ident)[19] in "89ab"


def test_an_ids_first_48_bits_are_its_unix_time_in_milliseconds() -> None:
    ident = new_id(AT)
    assert ident.int >> 80 == int(AT.timestamp() * 1000)
    # RFC 9562's example: 2022-02-22 19:22:22 UTC is 0x017F22E279B0.
    example = datetime(2022, 2, 22, 19, 22, 22, tzinfo=UTC)
    assert str(new_id(example)).startswith("017f22e2-79b0-7")


def test_an_ids_time_comes_back_to_the_millisecond() -> None:
    assert id_time(new_id(AT)) == AT.replace(microsecond=345_000)
    for moment in (datetime(1970, 1, 1, tzinfo=UTC), datetime(2999, 12, 31, tzinfo=UTC)):
        assert id_time(new_id(moment)) == moment


def test_ids_made_later_sort_after_earlier_ones() -> None:
    # A microsecond apart and more: the sub-millisecond bits keep them in order.
    moments = [AT + timedelta(microseconds=step) for step in range(0, 5000, 1)]
    ids = [new_id(moment) for moment in moments]
    assert ids == sorted(ids)
    assert [str(i) for i in ids] == sorted(str(i) for i in ids)


def test_ids_made_at_one_moment_differ() -> None:
    assert len({new_id(AT) for _ in range(10_000)}) == 10_000


def test_a_time_a_uuidv7_cannot_carry_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot carry"):
        new_id(datetime(1969, 12, 31, tzinfo=UTC))


@pytest.mark.parametrize(
    "ident",
    [
        uuid.uuid4(),
        uuid.uuid1(),
        uuid.UUID(int=0),
        # Version 7's nibble with another variant: not a UUIDv7.
        uuid.UUID(int=new_id(AT).int & ~(0b11 << 62) | (0b11 << 62)),
    ],
)
def test_an_id_that_is_not_a_uuidv7_has_no_time(ident: uuid.UUID) -> None:
    assert id_time(ident) is None


def test_a_uuidv7_past_the_year_9999_has_no_time() -> None:
    farthest = uuid.UUID(int=(1 << 48) - 1 << 80 | 7 << 76 | 0b10 << 62)
    assert id_time(farthest) is None
    assert created_window(farthest).start == datetime.min.replace(tzinfo=UTC)


def test_the_window_is_the_ids_time_give_or_take_the_margin() -> None:
    window = created_window(new_id(AT))
    made = AT.replace(microsecond=345_000)
    assert (window.start, window.end) == (made - ID_TIME_MARGIN, made + ID_TIME_MARGIN)
    assert window.params("p") == {"p_from": window.start, "p_until": window.end}
    assert within("created_at", "p") == "created_at >= %(p_from)s AND created_at < %(p_until)s"


def test_an_id_without_a_time_has_every_time_in_its_window() -> None:
    window = created_window(uuid.uuid4())
    assert window.start == datetime.min.replace(tzinfo=UTC)
    assert window.end == datetime.max.replace(tzinfo=UTC)


def test_a_seeds_ids_are_uuidv7_of_their_rows_time(db: psycopg.Connection[DictRow]) -> None:
    rows = db.execute(
        f"SELECT at, {id_sql('at', 'md5(g::text)')} AS id"
        " FROM generate_series(1, 2000) AS g,"
        " LATERAL (SELECT %s::timestamptz - make_interval(secs => g * 3600.123) AS at) AS t",
        (AT,),
    ).fetchall()
    ids = [row["id"] for row in rows]
    assert len(set(ids)) == len(ids)
    for row in rows:
        made = id_time(row["id"])
        assert made is not None, row
        assert made <= row["at"] < made + timedelta(milliseconds=1), row
    assert {str(i)[19] for i in ids} == set("89ab")
