"""`python -m bench.search`: its seed holds what each kind of search draws, so every figure
it prints is the time of a search that found its record (and `miss` of one that did not)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from app.db.migrate import upgrade_head
from bench.console_reads import measure_reads, reads_table, seed_history
from bench.search import measure, seed, table


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
