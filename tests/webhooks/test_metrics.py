"""The webhook metrics: events pending, the oldest wait, deliveries by outcome.

The backlog gauges count the whole database, so each test runs its own: a fresh database
on the session's server, its own API (and worker) on it, and nothing else writing there.
The values are then exact: only this test's events and deliveries exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from tests.support.control.database import test_database as fresh_database
from tests.support.control.processes import free_port
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, post_payment
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant
from tests.support.factories.webhooks import create_endpoint


def sample(text: str, name: str) -> float | None:
    """The value of the sample `name` (with its labels), or None if it is not exposed."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return None if found is None else float(found.group(1))


@pytest.fixture
def own_database(database_url: str, tmp_path: Path) -> Iterator[tuple[str, TenantHandle]]:
    """A fresh, migrated database of this test's own, and a tenant in it."""
    with fresh_database(database_url, tmp_path) as url:
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            tenant = make_tenant(conn)
        yield url, tenant


def test_pending_events_and_their_age_are_reported(
    spawn: Spawner, own_database: tuple[str, TenantHandle]
) -> None:
    url, tenant = own_database
    # Backlog readings are cached for a few seconds by default; read afresh on every scrape.
    api = spawn.api(DATABASE_URL=url, PAYMENTS_METRICS_BACKLOG_REFRESH_S="0")
    metrics = f"{api.admin_url}/metrics"
    try:
        text = httpx.get(metrics).text
        assert sample(text, "payments_webhook_events_pending") == 0
        assert sample(text, "payments_webhook_oldest_undelivered_age_seconds") == 0
        with api_client(api, tenant) as client:
            # Nobody listens there, and no worker runs: the deliveries stay pending.
            create_endpoint(client, f"http://127.0.0.1:{free_port()}/hook")
            assert post_payment(client, key=new_key()).status_code == 201
            wait_until(
                lambda: sample(httpx.get(metrics).text, "payments_webhook_events_pending") == 1,
                message="one pending event",
            )
            first_age = sample(
                httpx.get(metrics).text, "payments_webhook_oldest_undelivered_age_seconds"
            )
            assert first_age is not None
            assert first_age > 0
            assert post_payment(client, key=new_key()).status_code == 201

        def two_pending_and_older() -> bool:
            text = httpx.get(metrics).text
            age = sample(text, "payments_webhook_oldest_undelivered_age_seconds")
            pending = sample(text, "payments_webhook_events_pending")
            return pending == 2 and age is not None and age > first_age

        wait_until(two_pending_and_older, message="two pending events, the oldest older")
    finally:
        api.stop()


def test_deliveries_are_counted_by_outcome(
    spawn: Spawner, tmp_path: Path, own_database: tuple[str, TenantHandle]
) -> None:
    url, tenant = own_database
    api = spawn.api(DATABASE_URL=url, PAYMENTS_METRICS_BACKLOG_REFRESH_S="0")
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    receiver.mode("fail", times=1)
    port = free_port()
    worker = spawn.worker(
        once=False, **FAST_WEBHOOKS, DATABASE_URL=url, PAYMENTS_WORKER_METRICS_PORT=str(port)
    )
    metrics = f"http://127.0.0.1:{port}/metrics"
    try:
        with api_client(api, tenant) as client:
            create_endpoint(client, receiver.url)
            assert post_payment(client, key=new_key()).status_code == 201
        wait_until(lambda: len(receiver.answered()) == 1, message="the webhook")
        succeeded = 'payments_webhook_deliveries_total{outcome="succeeded"}'
        wait_until(
            lambda: sample(httpx.get(metrics).text, succeeded) == 1,
            message="the delivery counted as succeeded",
        )
        text = httpx.get(metrics).text
        # One event, one failed attempt then one that succeeded; nothing else.
        assert sample(text, 'payments_webhook_deliveries_total{outcome="retry"}') == 1
        assert sample(text, succeeded) == 1
        for outcome in ("failed", "fenced_out"):
            assert sample(text, f'payments_webhook_deliveries_total{{outcome="{outcome}"}}') in (
                None,
                0,
            )
        assert len(receiver.records()) == 2
        wait_until(
            lambda: (
                sample(
                    httpx.get(f"{api.admin_url}/metrics").text, "payments_webhook_events_pending"
                )
                == 0
            ),
            message="nothing pending",
        )
    finally:
        worker.stop()
        api.stop()
