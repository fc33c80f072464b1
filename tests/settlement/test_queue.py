"""The discrepancy queue's statements (`app/settlement/queue.py`, `changes.py`) on the
test database: lists filtered and paged oldest first, the open queue read through its
partial index (on the plan tests' seeded database), counts, an item with its history,
closing guarded and audited in one statement; and both records field by field (`views.py`).
"""

from __future__ import annotations

import uuid
from datetime import date, timedelta

import psycopg
import pytest
from psycopg.rows import DictRow

from app.errors import NotFound, ValidationFailed
from app.settlement.errors import ItemNotOpen
from app.settlement.queue import (
    DiscrepancyQueue,
    ItemFilter,
    StateFilter,
    list_sql,
    open_by_kind,
)
from app.settlement.rows import ItemKind, RecordType
from app.settlement.views import differing_fields, side_by_side
from tests.support.factories.discrepancies import (
    OURS,
    RUN_ACTOR,
    THEIRS,
    changes,
    empty_queue,
    item_row,
    make_item,
)
from tests.support.fixtures.plans import plan
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]


def _ids(queue: DiscrepancyQueue, async_db: AsyncDb, flt: ItemFilter) -> list[uuid.UUID]:
    page = async_db.run(queue.list(flt, limit=100))
    assert not page.has_more
    return [item.id for item in page.items]


def test_lists_filter_and_page_oldest_first(db: Db, async_db: AsyncDb) -> None:
    tenant = uuid.uuid4()
    yesterday = date.today() - timedelta(days=1)
    oldest = make_item(db, tenant_id=tenant, seen_ago_s=500, kind="missing", theirs=None)
    refund = make_item(db, tenant_id=tenant, seen_ago_s=400, record_type="refund")
    old_day = make_item(db, tenant_id=tenant, seen_ago_s=300, day=yesterday)
    resolved = make_item(db, tenant_id=tenant, seen_ago_s=200, state="resolved")
    auto = make_item(db, tenant_id=tenant, seen_ago_s=100, state="auto_resolved")
    make_item(db, seen_ago_s=1000)  # another tenant's
    queue = DiscrepancyQueue(async_db.db)

    # The open queue by default, oldest first.
    assert _ids(queue, async_db, ItemFilter(tenant_id=tenant)) == [oldest, refund, old_day]
    everything = ItemFilter(tenant_id=tenant, state=StateFilter.ALL)
    assert _ids(queue, async_db, everything) == [oldest, refund, old_day, resolved, auto]
    assert _ids(queue, async_db, ItemFilter(tenant_id=tenant, state=StateFilter.RESOLVED)) == [
        resolved
    ]
    by_kind = ItemFilter(tenant_id=tenant, kind=ItemKind.MISSING)
    assert _ids(queue, async_db, by_kind) == [oldest]
    refunds = ItemFilter(tenant_id=tenant, record_type=RecordType.REFUND)
    assert _ids(queue, async_db, refunds) == [refund]
    assert _ids(queue, async_db, ItemFilter(tenant_id=tenant, day=yesterday)) == [old_day]

    # Pages of two, each after the last id of the one before.
    first = async_db.run(queue.list(everything, limit=2))
    assert ([i.id for i in first.items], first.has_more) == ([oldest, refund], True)
    after = ItemFilter(tenant_id=tenant, state=StateFilter.ALL, after=refund)
    second = async_db.run(queue.list(after, limit=2))
    assert ([i.id for i in second.items], second.has_more) == ([old_day, resolved], True)
    last = ItemFilter(tenant_id=tenant, state=StateFilter.ALL, after=resolved)
    third = async_db.run(queue.list(last, limit=2))
    assert ([i.id for i in third.items], third.has_more) == ([auto], False)


def test_the_open_queue_walks_its_partial_index_in_page_order(plan_db: Db) -> None:
    # On the seeded database (tests/support/fixtures/plans.py), a queue as deployed: a few
    # open items among many closed ones. Open items other tests leave in the test database
    # (a queue where most items are open) would make the time index with a filter as cheap.
    for flt in (ItemFilter(kind=ItemKind.AMOUNT_MISMATCH, after=uuid.uuid4()), ItemFilter()):
        explained = plan(plan_db, *list_sql(flt, limit=50))
        assert "ix_reconciliation_items_open" in explained, explained
        if flt.kind is not None:
            # By kind, the index is already in (first_seen_at, id) order: nothing sorted.
            assert "Sort" not in explained.split("ix_reconciliation_items_open")[0], explained


def test_counts_by_kind_and_state_and_the_oldest_open(db: Db, async_db: AsyncDb) -> None:
    empty_queue(db)
    queue = DiscrepancyQueue(async_db.db)
    nothing = async_db.run(queue.summary())
    assert set(nothing.open_by_kind.values()) == {0}
    assert sorted(nothing.open_by_kind) == sorted(k.value for k in ItemKind)
    assert nothing.oldest_open_s is None
    assert nothing.by_state == {"open": 0, "auto_resolved": 0, "resolved": 0, "dismissed": 0}

    make_item(db, kind="missing", theirs=None, seen_ago_s=3600)
    make_item(db, kind="missing", theirs=None, seen_ago_s=10)
    make_item(db, kind="orphan", ours=None, seen_ago_s=20)
    make_item(db, kind="orphan", state="dismissed", seen_ago_s=7200)
    make_item(db, kind="expected", state="auto_resolved", seen_ago_s=7200)
    make_item(db, state="resolved", seen_ago_s=7200)
    summary = async_db.run(queue.summary())
    assert summary.open_by_kind == {
        "missing": 2,
        "orphan": 1,
        "amount_mismatch": 0,
        "currency_mismatch": 0,
        "status_mismatch": 0,
        "expected": 0,
    }
    assert summary.by_state == {"open": 3, "auto_resolved": 1, "resolved": 1, "dismissed": 1}
    # The oldest open item, not the older closed ones.
    assert summary.oldest_open_s is not None
    assert 3600 <= summary.oldest_open_s < 3660

    async def read() -> tuple[dict[str, int], float | None]:
        async with async_db.db.connection() as conn:
            return await open_by_kind(conn)

    counts, oldest = async_db.run(read())
    assert counts == summary.open_by_kind
    assert oldest is not None
    assert 3600 <= oldest < 3660


def test_closing_is_guarded_and_audited_in_one_statement(db: Db, async_db: AsyncDb) -> None:
    queue = DiscrepancyQueue(async_db.db)
    item_id = make_item(db)
    closed = async_db.run(queue.dismiss(item_id, "operator:bob", "  a test charge, never real \n"))
    assert (closed.state, closed.resolved_by) == ("dismissed", "operator:bob")
    assert closed.resolution_reason == "a test charge, never real"
    row = item_row(db, item_id)
    assert (row["state"], row["resolved_by"]) == ("dismissed", "operator:bob")
    trail = changes(db, item_id)
    assert [(c["from_state"], c["to_state"], c["actor"]) for c in trail] == [
        (None, "open", RUN_ACTOR),
        ("open", "dismissed", "operator:bob"),
    ]
    assert trail[-1]["reason"] == "a test charge, never real"
    assert trail[-1]["at"] == row["resolved_at"]

    # Closed: a second close changes nothing, and says what the item is.
    with pytest.raises(ItemNotOpen) as refused:
        async_db.run(queue.resolve(item_id, "operator:carol", "late"))
    assert refused.value.extra["state"] == "dismissed"
    assert item_row(db, item_id) == row
    assert len(changes(db, item_id)) == 2
    with pytest.raises(NotFound):
        async_db.run(queue.resolve(uuid.uuid4(), "operator:carol", "no such item"))
    detail = async_db.run(queue.read(item_id))
    assert [c.to_state for c in detail.history] == ["open", "dismissed"]


@pytest.mark.parametrize(
    "reason", ["", "   \n", "x" * 1001, "nul \x00 inside", "bell \x07", "lone \ud800"]
)
def test_a_close_without_a_usable_reason_changes_nothing(
    reason: str, db: Db, async_db: AsyncDb
) -> None:
    item_id = make_item(db)
    before = item_row(db, item_id)
    with pytest.raises(ValidationFailed):
        async_db.run(DiscrepancyQueue(async_db.db).resolve(item_id, "operator:bob", reason))
    assert item_row(db, item_id) == before
    assert len(changes(db, item_id)) == 1


def test_a_reason_of_1000_characters_with_line_breaks_is_kept(db: Db, async_db: AsyncDb) -> None:
    item_id = make_item(db)
    reason = "line one\n\tline two " + "x" * 981
    assert len(reason) == 1000
    closed = async_db.run(DiscrepancyQueue(async_db.db).resolve(item_id, "operator:a", reason))
    assert closed.resolution_reason == reason


def test_both_sides_field_by_field() -> None:
    ours = {**OURS, "status": "DECLINED", "provider_id": None}
    theirs = {**THEIRS, "currency": "USD"}
    pairs = {p.name: p for p in side_by_side(ours, theirs)}
    # What the run compares first, then the rest by name; the provider's own id beside the
    # one we recorded for it.
    assert list(pairs) == [
        "status",
        "amount_minor",
        "currency",
        "amount_refunded_minor",
        "provider_id",
        "created_at",
        "id",
        "operation_state",
    ]
    assert (pairs["amount_minor"].ours, pairs["amount_minor"].theirs) == ("1000", "1200")
    assert (pairs["provider_id"].ours, pairs["provider_id"].theirs) == ("null", "ch_0001")
    assert (pairs["id"].ours, pairs["id"].theirs) == (OURS["id"], "")
    assert (pairs["operation_state"].ours, pairs["operation_state"].theirs) == ("COMPLETED", "")
    # Marked: values both sides give and that differ. Not marked: a value one side lacks
    # (null, or no such field), the creation times, a status in another case.
    assert differing_fields(ours, theirs) == ["status", "amount_minor", "currency"]
    assert differing_fields(OURS, THEIRS) == ["amount_minor"]
    assert differing_fields({**OURS, "amount_minor": 1200}, THEIRS) == []
    # One side missing altogether: the record is the difference, no field is marked.
    assert differing_fields(OURS, None) == []
    assert {p.theirs for p in side_by_side(OURS, None)} == {""}
    refund = {"id": "re_1", "status": "succeeded", "charge_id": "ch_1", "amount_minor": 5}
    assert [p.name for p in side_by_side(None, refund)] == [
        "status",
        "amount_minor",
        "provider_id",
        "charge_id",
    ]
