"""Crashes around events and deliveries, with real processes killed inside the windows.

- The API killed after the provider charged, before the outcome was recorded: no event yet;
  the worker records the outcome and its one event together.
- A worker killed after the receiver took the request, before the attempt was recorded: the
  event is sent again, and the example consumer (inbox table) applies it once.
"""

from __future__ import annotations

import sqlite3
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.processes import Process, free_port, start_process
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS, FAST_WORKER
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_in_background
from tests.support.factories.tenants import TenantHandle
from tests.support.factories.webhooks import create_endpoint
from tests.support.readers.ledger import wait_charged
from tests.support.readers.operations import (
    operation,
    payment_for,
    wait_for_key_state,
    wait_for_state,
)

Db = psycopg.Connection[DictRow]
REPO = Path(__file__).resolve().parents[2]


def events_for(db: Db, operation_id: object) -> list[dict[str, object]]:
    return db.execute(
        "SELECT type, data FROM events WHERE operation_id = %s", (operation_id,)
    ).fetchall()


def test_an_event_is_written_only_with_its_outcome(
    background: ThreadPoolExecutor,
    spawn: Spawner,
    tenant: TenantHandle,
    db: Db,
    provider: Process,
) -> None:
    api = spawn.api(
        PAYMENTS_LEASE_S="3",
        PAYMENTS_PROVIDER_TIMEOUT_S="1",
        PAYMENTS_FAILPOINTS="before_record=60",
    )
    key = new_key()
    answer = post_in_background(background, api, tenant, key, payment_body())
    sent = wait_for_key_state(db, tenant, key, "PROVIDER_REQUEST_SENT")
    wait_charged(provider, payment_for(db, sent["id"])["provider_key"])
    api.kill()
    with pytest.raises(httpx.TransportError):
        answer.result(timeout=30)
    # Charged, but the outcome never recorded: no event.
    assert operation(db, sent["id"])["state"] == "PROVIDER_REQUEST_SENT"
    assert events_for(db, sent["id"]) == []

    spawn.worker(once=False, **FAST_WORKER)
    wait_for_state(db, sent["id"], "COMPLETED", timeout=40)
    [event] = events_for(db, sent["id"])
    assert event["type"] == "payment.succeeded"
    assert isinstance(event["data"], dict)
    assert event["data"]["status"] == "SUCCEEDED"


def _inbox(path: Path) -> tuple[int, list[int]]:
    if not path.exists():
        return 0, []
    with sqlite3.connect(path) as conn:
        try:
            events = conn.execute("SELECT count(*) FROM inbox").fetchone()[0]
            effects = [row[0] for row in conn.execute("SELECT effects FROM payments_seen")]
        except sqlite3.OperationalError:
            return 0, []
    return int(events), effects


def test_a_worker_killed_before_recording_redelivers_and_the_consumer_applies_once(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, db: Db
) -> None:
    port = free_port()
    endpoint = create_endpoint(client, f"http://127.0.0.1:{port}/hook")
    inbox = tmp_path / "inbox.sqlite3"
    consumer = start_process(
        "example-receiver",
        [
            sys.executable,
            str(REPO / "examples" / "webhook_receiver.py"),
            *("--port", str(port), "--db", str(inbox), "--secret", endpoint["secret"]),
        ],
        log_dir=tmp_path,
        ready_url=f"http://127.0.0.1:{port}/",
    )
    try:
        first = spawn.worker(
            once=False, **FAST_WEBHOOKS, PAYMENTS_FAILPOINTS="webhook_before_record=60"
        )
        response = client.post(
            "/payments", json=payment_body(), headers={"Idempotency-Key": new_key()}
        )
        assert response.status_code == 201
        # The consumer has committed the event; the worker waits before recording it.
        wait_until(lambda: _inbox(inbox) == (1, [1]), message="the consumer to apply it")
        first.kill()
        [delivery] = db.execute(
            "SELECT d.* FROM webhook_deliveries d JOIN events e ON e.id = d.event_id "
            "WHERE e.operation_id = %s",
            (response.json()["operation_id"],),
        ).fetchall()
        assert delivery["status"] == "pending"
        assert delivery["attempt_count"] == 0

        spawn.worker(once=False, **FAST_WEBHOOKS)

        def succeeded() -> bool:
            row = db.execute(
                "SELECT status FROM webhook_deliveries WHERE id = %s", (delivery["id"],)
            ).fetchone()
            return row is not None and row["status"] == "succeeded"

        wait_until(succeeded, timeout=60, message="the redelivery")
        # Sent twice, applied once.
        assert _inbox(inbox) == (1, [1])
        assert "duplicate, ignored: payment.succeeded" in consumer.log()
    finally:
        consumer.stop()
