"""PostgreSQL restarted under traffic: clean failures, nothing lost, recovery without a restart.

This test runs its own embedded PostgreSQL, so stopping it touches no other test.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from app.db.embedded import EmbeddedPostgres
from app.db.migrate import upgrade_head
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.system import start_api
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant


@dataclass
class Traffic:
    """Requests sent and what came back: (key, body, status or None for a transport error)."""

    history: list[tuple[str, dict[str, object], int | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def count(self, status: int | None) -> int:
        with self.lock:
            return sum(1 for _, _, s in self.history if s == status)


@pytest.fixture
def own_database() -> Iterator[EmbeddedPostgres]:
    data_dir = Path(tempfile.mkdtemp(prefix="payments-restart-pg-"))
    server = EmbeddedPostgres(data_dir, database="payments_restart")
    server.start()
    upgrade_head(server.url())
    yield server
    server.stop(mode="immediate")
    shutil.rmtree(data_dir, ignore_errors=True)


def _send(client: httpx.Client, traffic: Traffic) -> None:
    while not traffic.stop.is_set():
        key, body = new_key(), payment_body()
        try:
            status: int | None = client.post(
                "/payments", json=body, headers={"Idempotency-Key": key}
            ).status_code
        except httpx.TransportError:
            status = None
        with traffic.lock:
            traffic.history.append((key, body, status))


def test_database_restart_under_traffic(
    own_database: EmbeddedPostgres,
    base_env: dict[str, str],
    work_dir: Path,
    faults: FaultInjector,
) -> None:
    url = own_database.url()
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        tenant: TenantHandle = make_tenant(conn)
    api: Process = start_api(work_dir / "logs", {**base_env, "DATABASE_URL": url})
    traffic = Traffic()
    try:
        with api_client(api, tenant) as client:
            senders = [threading.Thread(target=_send, args=(client, traffic)) for _ in range(4)]
            for sender in senders:
                sender.start()
            try:
                wait_until(lambda: traffic.count(201) >= 20, message="traffic flowing")
                own_database.stop(mode="fast")
                wait_until(lambda: traffic.count(503) >= 10, message="clean 503s in the outage")
                served_before = traffic.count(201)
                own_database.start()
                wait_until(
                    lambda: traffic.count(201) >= served_before + 20,
                    message="traffic served again after the restart",
                )
            finally:
                traffic.stop.set()
                for sender in senders:
                    sender.join(timeout=60)

            statuses = {status for _, _, status in traffic.history}
            # The API never crashed or hung up, and never answered with an unexplained 500.
            assert statuses <= {201, 202, 409, 503}, statuses
            assert api.alive()

            # Every key converges to exactly one outcome: retry the ones not answered 201.
            for key, body, status in traffic.history:
                if status == 201:
                    continue

                def settled(key: str = key, body: dict[str, object] = body) -> bool:
                    response = client.post(
                        "/payments",
                        json=body,
                        headers={"Idempotency-Key": key, "Prefer": "wait=5"},
                    )
                    return response.status_code == 201

                wait_until(settled, timeout=60, interval=0.2, message=f"key {key} to settle")
    finally:
        api.stop()

    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT p.provider_key, p.status, p.account_id, p.provider_charge_id "
            "FROM payments p WHERE p.tenant_id = %s",
            (tenant.id,),
        ).fetchall()
    assert len(rows) == len(traffic.history)
    charges = faults.charges()
    ledger = {c["idempotency_key"]: c for c in charges}
    per_account = Counter(c["account_id"] for c in charges)
    for row in rows:
        # Nothing a client was told succeeded is lost, and nothing was charged twice.
        assert row["status"] == "SUCCEEDED"
        charge = ledger[row["provider_key"]]
        assert charge["charge_id"] == row["provider_charge_id"]
        assert per_account[row["account_id"]] == 1
