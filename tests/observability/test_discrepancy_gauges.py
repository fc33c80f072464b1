"""The discrepancy queue's gauges on `/metrics`: open items by kind and the oldest open
item's age, read from the database like the other backlog gauges, exact.

A dedicated API reads them on every scrape (`PAYMENTS_METRICS_BACKLOG_REFRESH_S=0`); the
queue starts empty, so the figures are the test's own items.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from app.settlement.rows import ItemKind
from tests.observability.test_metrics_and_logs import _metric, _scrape
from tests.support.control.spawner import Spawner
from tests.support.factories.discrepancies import empty_queue, make_item
from tests.support.factories.operators import AdminHandle

Db = psycopg.Connection[DictRow]
OPEN = "payments_discrepancies_open"
OLDEST = "payments_discrepancies_oldest_open_seconds"


def _open_by_kind(text: str) -> dict[str, float]:
    return {kind.value: _metric(text, OPEN, kind=kind.value) for kind in ItemKind}


def test_the_gauges_show_the_open_queue_by_kind_and_its_oldest_item(
    spawn: Spawner, db: Db, admin: AdminHandle
) -> None:
    empty_queue(db)
    # A few connections are enough for it (and the database server is shared).
    api = spawn.api(PAYMENTS_METRICS_BACKLOG_REFRESH_S="0", PAYMENTS_DB_POOL_SIZE="4")
    assert api.admin_url is not None
    empty = _scrape(api.admin_url)
    # Every kind has its series, at zero, from the first scrape.
    for kind in ItemKind:
        assert f'{OPEN}{{kind="{kind.value}"}} 0.0' in empty
    assert f"{OLDEST} 0.0" in empty

    make_item(db, kind="missing", theirs=None, seen_ago_s=5400)
    make_item(db, kind="missing", theirs=None, seen_ago_s=60)
    make_item(db, kind="amount_mismatch", seen_ago_s=30)
    make_item(db, kind="expected", seen_ago_s=30)
    # Closed ones count for nothing, however old.
    make_item(db, kind="orphan", state="dismissed", seen_ago_s=90000)
    make_item(db, kind="status_mismatch", state="resolved", seen_ago_s=90000)
    make_item(db, kind="currency_mismatch", state="auto_resolved", seen_ago_s=90000)
    text = _scrape(api.admin_url)
    assert _open_by_kind(text) == {
        "missing": 2,
        "orphan": 0,
        "amount_mismatch": 1,
        "currency_mismatch": 0,
        "status_mismatch": 0,
        "expected": 1,
    }
    assert 5400 <= _metric(text, OLDEST) < 5460

    # The oldest resolved: the gauge moves to the next oldest, the count down by one.
    headers = {"Authorization": f"Bearer {admin.token}"}
    with httpx.Client(base_url=api.admin_url, headers=headers) as http:
        oldest = http.get("/admin/discrepancies", params={"kind": "missing", "limit": 1}).json()[
            "data"
        ][0]
        resolved = http.post(
            f"/admin/discrepancies/{oldest['id']}/resolve", json={"reason": "found it"}
        )
        assert resolved.status_code == 200, resolved.text
    text = _scrape(api.admin_url)
    assert _metric(text, OPEN, kind="missing") == 1
    assert 60 <= _metric(text, OLDEST) < 120

    empty_queue(db)
    text = _scrape(api.admin_url)
    assert set(_open_by_kind(text).values()) == {0}
    assert _metric(text, OLDEST) == 0
