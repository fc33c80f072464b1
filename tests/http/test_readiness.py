"""`/readyz` under load: one database check a second at most, shared by every caller.

Counted by PostgreSQL: the check is the one statement that reads `alembic_version`, so that
table's scans are the checks made (read once the API has stopped:
tests/support/control/statistics.py).
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
from psycopg.rows import DictRow

from app.health import CHECK_INTERVAL_S
from tests.support.control.spawner import Spawner
from tests.support.control.statistics import read_counts, stop_and_wait_for_counts


def test_many_readiness_probes_make_one_database_check_a_second(
    spawn: Spawner, db: psycopg.Connection[DictRow]
) -> None:
    before = read_counts(db, "alembic_version")
    api = spawn.api()
    assert api.url is not None
    assert api.admin_url is not None
    urls = [f"{api.url}/readyz", f"{api.admin_url}/readyz"]
    probes = 400

    def probe_all(offset: int) -> list[int]:
        with httpx.Client() as client:
            return [client.get(urls[(offset + i) % 2]).status_code for i in range(probes // 8)]

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = [code for codes in pool.map(probe_all, range(8)) for code in codes]
    elapsed = time.monotonic() - started
    ready = httpx.get(urls[0])
    assert ready.status_code == 200, ready.text
    assert ready.json()["status"] == "ready"
    stop_and_wait_for_counts(db, api)
    checks = read_counts(db, "alembic_version").since(before).scans["alembic_version"]

    assert answers == [200] * probes
    # Each check starts more than CHECK_INTERVAL_S after the one before it; a check a probe
    # would be 401.
    assert 1 <= checks <= 1 + math.ceil((elapsed + 1) / CHECK_INTERVAL_S), (checks, elapsed)
