"""The providers' notifications' backlog gauge on `/metrics`: the inbox's events not yet
applied, by state (received, parked), read from the database like the other backlog
gauges, exact; applied and rejected events count for nothing.

A dedicated API reads them on every scrape (`PAYMENTS_METRICS_BACKLOG_REFRESH_S=0`) and no
worker runs, so seeded rows stay as they are; the figures are compared with the first
scrape's, the shared database's other rows aside.
"""

from __future__ import annotations

import uuid

import psycopg
from psycopg.rows import DictRow

from tests.admin.test_admin_provider_events import seed, seed_four
from tests.observability.test_metrics_and_logs import _metric, _scrape
from tests.support.control.spawner import Spawner

Db = psycopg.Connection[DictRow]
PENDING = "payments_provider_events_pending"
CONTRADICTED = "payments_provider_events_contradicted"


def _pending(text: str) -> dict[str, float]:
    return {state: _metric(text, PENDING, state=state) for state in ("received", "parked")}


def test_the_gauge_counts_the_inbox_events_not_yet_applied_by_state(spawn: Spawner, db: Db) -> None:
    api = spawn.api(PAYMENTS_METRICS_BACKLOG_REFRESH_S="0", PAYMENTS_DB_POOL_SIZE="4")
    assert api.admin_url is not None
    before = _scrape(api.admin_url)
    # Both series exist from the first scrape, whatever the inbox holds.
    for state in ("received", "parked"):
        assert f'{PENDING}{{state="{state}"}}' in before
    assert 'state="applied"' not in "".join(
        line for line in before.splitlines() if line.startswith(PENDING)
    )

    provider = f"p{uuid.uuid4().hex[:12]}"
    seeded = seed_four(db, provider)
    seed(db, provider, "received")
    after = _scrape(api.admin_url)
    grown = {s: _pending(after)[s] - _pending(before)[s] for s in ("received", "parked")}
    assert grown == {"received": 2, "parked": 1}

    db.execute(
        "UPDATE provider_events SET state = 'applied', next_attempt_at = NULL WHERE id = %s",
        (seeded["parked"]["id"],),
    )
    assert _pending(_scrape(api.admin_url))["parked"] == _pending(before)["parked"]


def test_the_contradicted_events_have_a_gauge_of_their_own(spawn: Spawner, db: Db) -> None:
    api = spawn.api(PAYMENTS_METRICS_BACKLOG_REFRESH_S="0", PAYMENTS_DB_POOL_SIZE="4")
    assert api.admin_url is not None
    before = _metric(_scrape(api.admin_url), CONTRADICTED)
    provider = f"p{uuid.uuid4().hex[:12]}"
    seed(db, provider, "contradicted", next_attempt_at=None)
    seed(db, provider, "applied", next_attempt_at=None)
    assert _metric(_scrape(api.admin_url), CONTRADICTED) - before == 1
