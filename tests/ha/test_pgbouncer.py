"""The service behind PgBouncer in transaction mode.

The service prepares every statement on the server (app/db/database.py). PgBouncer before
1.21 cannot carry prepared statements in transaction mode: there the API and the worker
refuse to start, saying why, and with `PAYMENTS_DB_PREPARE=false` payments go through it,
many client connections on a few server sessions. PgBouncer 1.21 and later with
`max_prepared_statements` carry them, and the service starts with preparing on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.support.control.faults import FaultInjector
from tests.support.control.pgbouncer import (
    PgBouncer,
    carries_prepared_statements,
    pgbouncer,
    version,
)
from tests.support.control.system import start_api, start_worker
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant
from tests.support.readers.ledger import ledger_by_key

pytestmark = [
    pytest.mark.ha,
    pytest.mark.skipif(
        version() is None, reason="pgbouncer is not installed (Debian: apt-get install pgbouncer)"
    ),
]
# Starting a process takes long on a loaded machine (two cores, other work running).
START_S = 120

POOL_SIZE = 4  # server sessions PgBouncer keeps per database
CLIENTS = 8
PAYMENTS = 200


@pytest.fixture
def bouncer(database_url: str) -> Iterator[PgBouncer]:
    with pgbouncer(database_url, pool_size=POOL_SIZE) as running:
        yield running


def _through(bouncer: PgBouncer, database_url: str) -> str:
    return bouncer.url(urlsplit(database_url).path.lstrip("/"))


@pytest.mark.skipif(carries_prepared_statements(), reason="this PgBouncer carries them")
def test_the_service_refuses_a_transaction_pooler_that_cannot_carry_prepared_statements(
    bouncer: PgBouncer, database_url: str, base_env: dict[str, str], work_dir: Path
) -> None:
    env = {**base_env, "DATABASE_URL": _through(bouncer, database_url)}
    with pytest.raises(AssertionError, match="exited early") as refused:
        start_api(work_dir / "logs-pgbouncer", env, timeout=START_S)
    assert "reaches a pooler in transaction mode" in str(refused.value)
    assert "PAYMENTS_DB_PREPARE=false" in str(refused.value)
    worker = start_worker(work_dir / "logs-pgbouncer", env)
    assert worker.wait_exit(timeout=START_S) != 0
    assert "reaches a pooler in transaction mode" in worker.log()


def test_payments_through_pgbouncer_in_transaction_mode(
    bouncer: PgBouncer,
    database_url: str,
    base_env: dict[str, str],
    work_dir: Path,
    faults: FaultInjector,
) -> None:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        tenant: TenantHandle = make_tenant(conn)
    env = {**base_env, "DATABASE_URL": _through(bouncer, database_url)}
    if not carries_prepared_statements():
        env["PAYMENTS_DB_PREPARE"] = "false"
    logs = work_dir / "logs-pgbouncer"
    # Each keeps 20 connections to PgBouncer, which serves them all on POOL_SIZE sessions.
    api = start_api(logs, env, timeout=START_S)
    worker = start_worker(logs, env)
    keys: list[tuple[str, dict[str, str], str]] = []
    failures: list[str] = []
    lock = threading.Lock()
    try:
        with api_client(api, tenant) as client:

            def send(count: int) -> None:
                for _ in range(count):
                    key, body = new_key(), payment_body()
                    answer = client.post("/payments", json=body, headers={"Idempotency-Key": key})
                    with lock:
                        if answer.status_code == 201:
                            keys.append((key, body, answer.json()["payment_id"]))
                        else:
                            failures.append(f"{answer.status_code}: {answer.text}")

            threads = [
                threading.Thread(target=send, args=(PAYMENTS // CLIENTS,)) for _ in range(CLIENTS)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=300)
            assert failures == []
            assert len(keys) == PAYMENTS
            for key, body, payment_id in keys:
                read = client.get(f"/payments/{payment_id}")
                assert read.status_code == 200, read.text
                replay = client.post("/payments", json=body, headers={"Idempotency-Key": key})
                assert replay.status_code == 201, replay.text
                assert replay.headers["idempotent-replayed"] == "true"
            _assert_pooled(bouncer)
        assert api.alive()
        assert worker.alive()
        for log in (api.log(), worker.log()):
            assert "Traceback" not in log
            assert "prepared statement" not in log
    finally:
        api.stop()
        worker.stop()
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as db:
        rows = db.execute(
            "SELECT provider_key, status FROM payments WHERE tenant_id = %s", (tenant.id,)
        ).fetchall()
    assert len(rows) == PAYMENTS
    ledger = ledger_by_key(faults)
    for row in rows:
        assert row["status"] == "SUCCEEDED"
        assert len(ledger[row["provider_key"]]) == 1


def _assert_pooled(bouncer: PgBouncer) -> None:
    """PgBouncer served the API's and the worker's many connections on its few sessions."""
    with psycopg.connect(bouncer.url("pgbouncer"), autocommit=True) as admin:
        cursor = psycopg.ClientCursor(admin)  # the admin console takes no extended protocol
        cursor.execute("SHOW POOLS")
        names = [d.name for d in cursor.description or []]
        pools = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    served = [p for p in pools if p["database"] not in ("pgbouncer", "postgres")]
    assert served, pools
    clients = sum(int(p["cl_active"]) + int(p["cl_waiting"]) for p in served)
    servers = sum(int(p["sv_active"]) + int(p["sv_idle"]) + int(p["sv_used"]) for p in served)
    assert clients > POOL_SIZE, pools
    assert servers <= POOL_SIZE, pools
