"""Several workers, a backlog, and an endpoint that does not answer."""

from __future__ import annotations

import itertools
import uuid
from collections import defaultdict
from pathlib import Path

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, post_payment
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant
from tests.support.factories.webhooks import backlog, create_endpoint
from tests.support.readers.webhooks import pending, verified

Db = psycopg.Connection[DictRow]


def test_two_workers_deliver_a_backlog_never_sending_one_twice_at_once(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    endpoint = create_endpoint(client, receiver.url)
    settings = {**FAST_WEBHOOKS, "PAYMENTS_WEBHOOK_ENDPOINT_CONCURRENCY": "8"}
    workers = [spawn.worker(once=False, **settings) for _ in range(2)]
    wait_until(
        lambda: all("worker started" in worker.log() for worker in workers),
        message="both workers to start",
    )
    backlog(db, tenant.id, endpoint, 1000, "payment.succeeded")

    wait_until(lambda: pending(db, endpoint) == 0, timeout=180, message="the backlog")
    records = receiver.records()
    by_event: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for record in records:
        assert record["status"] == 200
        by_event[record["headers"]["webhook-id"]].append((record["arrived"], record["answered"]))
    assert len(by_event) == 1000
    for spans in by_event.values():
        spans.sort()
        for (_, answered), (arrived, _) in itertools.pairwise(spans):
            assert arrived >= answered, "one event was sent twice at once"
    verified(records[0], endpoint["secret"])
    endpoint_id = uuid.UUID(hex=endpoint["id"].removeprefix("we_"))
    attempts = db.execute(
        "SELECT a.worker, count(*) AS n FROM webhook_attempts a "
        "JOIN webhook_deliveries d ON d.id = a.delivery_id "
        "WHERE d.endpoint_id = %s AND a.succeeded GROUP BY a.worker",
        (endpoint_id,),
    ).fetchall()
    # Every request the receiver answered was recorded as one successful attempt (an
    # attempt that never reached it, a refused connection under the burst, is retried),
    # and both workers took part.
    assert sum(row["n"] for row in attempts) == len(records) == 1000
    assert len(attempts) == 2


def test_an_endpoint_that_does_not_answer_does_not_hold_up_another(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    dead = spawn.receiver(tmp_path / "dead.jsonl")
    dead.mode("hang")
    healthy = spawn.receiver(tmp_path / "healthy.jsonl")
    stuck = create_endpoint(client, dead.url, event_types=["payment.declined"])
    fine = create_endpoint(client, healthy.url, event_types=["payment.succeeded"])
    backlog(db, tenant.id, stuck, 20, "payment.declined")
    settings = {
        **FAST_WEBHOOKS,
        "PAYMENTS_WEBHOOK_TIMEOUT_S": "20",
        "PAYMENTS_WEBHOOK_LEASE_S": "30",
        "PAYMENTS_WEBHOOK_CONCURRENCY": "8",
        "PAYMENTS_WEBHOOK_ENDPOINT_CONCURRENCY": "4",
    }
    spawn.worker(once=False, **settings)
    # The dead endpoint holds its share of the worker's slots, and no more.
    wait_until(lambda: len(dead.records()) == 4, message="attempts to the dead endpoint")
    try:
        assert post_payment(client, key=new_key()).status_code == 201
        wait_until(lambda: len(healthy.answered()) == 1, timeout=15, message="the healthy one")
        # Delivered while every attempt to the dead endpoint was still waiting for an answer.
        assert len(dead.records()) == 4
        assert pending(db, stuck) == 20
        stuck_id = uuid.UUID(hex=stuck["id"].removeprefix("we_"))
        recorded = db.execute(
            "SELECT count(*) AS n FROM webhook_attempts a JOIN webhook_deliveries d "
            "ON d.id = a.delivery_id WHERE d.endpoint_id = %s",
            (stuck_id,),
        ).fetchone()
        assert recorded is not None
        assert recorded["n"] == 0
        assert verified(healthy.answered()[0], fine["secret"])["type"] == "payment.succeeded"
    finally:
        dead.release()


def test_a_tenant_with_slow_endpoints_holds_its_share_of_slots_not_all(
    spawn: Spawner,
    tmp_path: Path,
    api: Process,
    client: httpx.Client,
    tenant: TenantHandle,
    db: Db,
) -> None:
    dead = spawn.receiver(tmp_path / "dead.jsonl")
    dead.mode("hang")
    healthy = spawn.receiver(tmp_path / "healthy.jsonl")
    # Three endpoints of one tenant, none answering: with 4 attempts each they could take
    # 12 slots, more than the worker's 8.
    slow = [create_endpoint(client, f"{dead.url}/{n}") for n in range(3)]
    for endpoint in slow:
        backlog(db, tenant.id, endpoint, 10, "payment.declined")
    other = make_tenant(db, "another tenant")
    with api_client(api, other) as other_client:
        fine = create_endpoint(other_client, healthy.url)
    settings = {
        **FAST_WEBHOOKS,
        "PAYMENTS_WEBHOOK_TIMEOUT_S": "20",
        "PAYMENTS_WEBHOOK_LEASE_S": "30",
        "PAYMENTS_WEBHOOK_CONCURRENCY": "8",
        "PAYMENTS_WEBHOOK_ENDPOINT_CONCURRENCY": "4",
        "PAYMENTS_WEBHOOK_TENANT_CONCURRENCY": "3",
    }
    spawn.worker(once=False, **settings)
    wait_until(lambda: len(dead.records()) == 3, message="the slow tenant's attempts")
    try:
        backlog(db, other.id, fine, 1, "payment.succeeded")
        wait_until(lambda: len(healthy.answered()) == 1, timeout=15, message="the other tenant")
        # Delivered while the slow tenant's three attempts were still waiting, and it got
        # no fourth slot meanwhile.
        assert len(dead.records()) == 3
        assert sum(pending(db, endpoint) for endpoint in slow) == 30
    finally:
        dead.release()


def test_a_delivery_queued_as_its_endpoint_was_deleted_is_cancelled_unsent(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    endpoint = create_endpoint(client, receiver.url)
    assert client.delete(f"/webhook-endpoints/{endpoint['id']}").status_code == 204
    # An outcome's fan-out that read the endpoint just before the delete committed.
    backlog(db, tenant.id, endpoint, 1, "payment.succeeded")
    assert pending(db, endpoint) == 1
    spawn.worker(once=True, **FAST_WEBHOOKS).wait_exit(timeout=60)

    assert pending(db, endpoint) == 0
    endpoint_id = uuid.UUID(hex=endpoint["id"].removeprefix("we_"))
    row = db.execute(
        "SELECT status, attempt_count FROM webhook_deliveries WHERE endpoint_id = %s",
        (endpoint_id,),
    ).fetchone()
    assert row == {"status": "cancelled", "attempt_count": 0}
    assert receiver.records() == []
