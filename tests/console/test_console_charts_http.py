"""The dashboard's charts over plain HTTP: server-drawn SVG of payments by outcome, the
recovery backlog and webhook delivery attempts, for the last hour or day; and the backlog
rebuilt from the audit trail, read through its partial index."""

from __future__ import annotations

import re
import uuid

import httpx
import psycopg
from psycopg.rows import DictRow

from app.admin.activity import WINDOWS, backlog_points, recovery_backlog
from app.console.charts import upper_bound
from tests.console.test_console_http import _login
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle, flag
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.webhooks import create_endpoint
from tests.support.fixtures.plans import plan
from tests.support.fixtures.repository import AsyncDb


def _total(page: str, chart: str, name: str) -> str:
    figure = page[page.index(f'id="{chart}"') :]
    found = re.search(rf'data-total="{name}">([^<]*)<', figure)
    assert found is not None, (chart, name)
    return found.group(1)


def test_the_dashboard_draws_the_last_hour_and_day(
    api: Process,
    admin: AdminHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
    async_db: AsyncDb,
) -> None:
    create_endpoint(client, "http://127.0.0.1:9/hook")
    made = post_payment(client, payment_body(), key=new_key())
    declined = post_payment(client, payment_body(account_id="acc_decline_"), key=new_key())
    assert (made.status_code, declined.status_code) == (201, 402)
    flag(client, faults, db, charged=True)
    faults.clear()
    delivery = db.execute(
        "SELECT d.id, d.tenant_id FROM webhook_deliveries d JOIN events e ON e.id = d.event_id"
        " WHERE e.operation_id = %s",
        (uuid.UUID(made.json()["operation_id"]),),
    ).fetchone()
    assert delivery is not None
    for succeeded in (True, False, False):
        db.execute(
            "INSERT INTO webhook_attempts (tenant_id, delivery_id, worker, succeeded, latency_ms)"
            " VALUES (%s, %s, 'test', %s, 5)",
            (delivery["tenant_id"], delivery["id"], succeeded),
        )

    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        for window in ("hour", "day", "nonsense"):
            page = http.get("/console", params={"window": window})
            assert page.status_code == 200
            assert "<script" not in page.text
            for chart in ("chart-payments", "chart-backlog", "chart-webhooks"):
                assert (
                    f'<svg viewBox="0 0 600 140" role="img" aria-labelledby="{chart}-t' in page.text
                )
            assert int(_total(page.text, "chart-payments", "succeeded")) >= 1
            assert int(_total(page.text, "chart-payments", "declined")) >= 1
            assert int(_total(page.text, "chart-backlog", "now")) >= 1
            assert int(_total(page.text, "chart-webhooks", "succeeded")) >= 1
            assert int(_total(page.text, "chart-webhooks", "failed")) >= 2
            assert "% succeeded" in _total(page.text, "chart-webhooks", "rate")
            assert 'id="breaker-state">closed<' in page.text
            calls = page.text[page.text.index('id="provider-calls"') :]
            assert re.search(
                r"<td>charge</td><td>\d+</td><td>[\d.]+ ms</td><td>[\d.]+ ms</td>", calls
            )
            shown = "day" if window == "day" else "hour"
            assert f"Activity in the last {shown}" in page.text

    async def backlog() -> tuple[int, float]:
        async with async_db.db.connection() as conn:
            points = await recovery_backlog(conn, WINDOWS["hour"])
        return points[0].count, points[0].oldest_s

    count, oldest = async_db.run(backlog())
    assert count >= 1
    assert oldest > 0


def test_latency_bounds_come_from_the_histograms_buckets() -> None:
    buckets = [(0.005, 10.0), (0.01, 90.0), (0.025, 99.0), (0.05, 100.0), (float("inf"), 100.0)]
    assert upper_bound(buckets, 0.5) == 0.01
    assert upper_bound(buckets, 0.99) == 0.025
    assert upper_bound([(0.005, 0.0), (float("inf"), 3.0)], 0.5) == float("inf")
    assert upper_bound([], 0.5) == float("inf")


def test_the_backlog_at_each_moment_counts_the_stays_open_then() -> None:
    # Seconds ago: one stay from 150 s to 30 s ago, one open since 90 s ago, one that began
    # and ended within the first minute (70 to 65 s ago), none before.
    # One more ended before the hour began.
    stays: list[tuple[float, float | None]] = [
        (150.0, 30.0),
        (90.0, None),
        (70.0, 65.0),
        (9000.0, 4000.0),
    ]
    points = backlog_points(stays, WINDOWS["hour"])
    assert [(p.count, p.oldest_s) for p in points[:4]] == [
        (1, 90.0),  # now: only the open one
        (2, 90.0),  # 60 s ago: both long stays; the short one is over
        (1, 30.0),  # 120 s ago: the first, 30 s in
        (0, 0.0),
    ]
    assert all(p.count == 0 for p in points[3:])


def test_the_backlog_reads_only_the_entries_into_recovery(
    plan_db: psycopg.Connection[DictRow],
) -> None:
    from app.operations.backlog import RECOVERY_STAYS_SQL

    # On the seeded database (tests/support/fixtures/plans.py): an audit trail as deployed,
    # with a few entries into recovery among many transitions.
    explained = plan(plan_db, RECOVERY_STAYS_SQL)
    assert "ix_operation_transitions_recovery" in explained, explained
    assert "Seq Scan" not in explained, explained
