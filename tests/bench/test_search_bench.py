"""`python -m bench.search`: its seed holds what each kind of search draws, so every figure
it prints is the time of a search that found its record (and `miss` of one that did not)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid

import psycopg
import pytest

from app.admin.search import search
from app.db.migrate import upgrade_head
from app.ids import id_time
from bench.console_reads import measure_reads, reads_table, seed_history
from bench.search import RECORDS, measure, seed, table
from bench.search_ids import seeded_id

# Seeded rows whose md5 alone has a 7 in the version digit and the RFC variant: taken as it
# is, it reads as a UUIDv7 of a random moment, and a read by it looks in the wrong days.
LOOK_LIKE_V7 = {"op": (115, 123), "pay": (6, 54, 91, 143, 157, 175)}


@pytest.fixture
def fresh_url(scratch_database: str) -> str:
    """A migrated database of its own on the test server: the seed adds tenants."""
    upgrade_head(scratch_database)
    return scratch_database


def test_every_kind_finds_what_the_seed_holds(fresh_url: str) -> None:
    seed(fresh_url, 300)
    with psycopg.connect(fresh_url) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM operations), (SELECT count(*) FROM payments),"
            " (SELECT count(*) FROM refunds), (SELECT count(*) FROM events),"
            " (SELECT count(*) FROM webhook_deliveries)"
        ).fetchone()
    assert counts == (300, 270, 30, 300, 30)
    rows = asyncio.run(measure(fresh_url, 300, queries=20, warmup=2))
    by_kind = {row.kind: row for row in rows}
    assert by_kind.pop("miss").hits_per_query == 0
    assert len(by_kind) == 11
    for kind, row in by_kind.items():
        assert row.hits_per_query >= 1, kind
        assert 0 < row.median_ms <= row.p99_ms <= row.max_ms, kind
    assert "| idempotency key |" in table(rows)

    seed_history(fresh_url, 300)
    others = asyncio.run(measure_reads(fresh_url, repeats=2))
    assert len(others) == 13
    assert all(0 < median <= p99 <= most for _, median, p99, most in others)
    assert "| chart: backlog, day |" in reads_table(others)


async def _found_by_id(url: str, ids: dict[str, set[uuid.UUID]]) -> dict[str, set[uuid.UUID]]:
    """Of each kind's ids, those the operators' search finds as that kind's id."""
    found: dict[str, set[uuid.UUID]] = {kind: set() for kind in ids}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for kind, kind_ids in ids.items():
            for ident in kind_ids:
                hits = await search(conn, str(ident), records=RECORDS)
                found[kind] |= {h.id for h in hits if (h.kind, h.matched) == (kind, "id")}
    return found


def test_the_search_finds_every_seeded_operation_payment_and_refund_by_its_id(
    fresh_url: str,
) -> None:
    for prefix, rows in LOOK_LIKE_V7.items():
        for g in rows:
            digest = hashlib.md5(f"{prefix}{g}".encode()).hexdigest()
            assert id_time(uuid.UUID(digest)) is not None, (prefix, g)
    seed(fresh_url, 300)
    expected = {
        "operation": {seeded_id("op", g) for g in range(1, 301)},
        "payment": {seeded_id("pay", g) for g in range(1, 301) if g % 10},
        "refund": {seeded_id("ref", g) for g in range(10, 301, 10)},
    }
    with psycopg.connect(fresh_url) as conn:
        stored = {
            kind: {row[0] for row in conn.execute(f"SELECT id FROM {kind}s")} for kind in expected
        }
    # The ids the searches draw are the ids the seed wrote.
    assert stored == expected
    found = asyncio.run(_found_by_id(fresh_url, expected))
    missed = {kind: ids - found[kind] for kind, ids in expected.items() if ids != found[kind]}
    assert missed == {}
