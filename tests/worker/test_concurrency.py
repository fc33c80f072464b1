"""Workers racing each other, and client retries, over the same unknown operations.

Two workers draining the same backlog of 1,000 unknown operations at once:
Claims use FOR UPDATE SKIP LOCKED plus a fence bump, so the workers split the backlog without
waiting on each other: every operation ends COMPLETED exactly once, by one of them, with no
fence shared between the two and exactly one provider charge. The throughput is printed,
never asserted (the benchmark owns speed).

Client retries and two polling workers going for the same unknown operation at the moment it
falls due: whoever wins, one owner at a time, one completion, one charge, and every final
answer is the stored one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER
from tests.support.control.waiting import wait_connected
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle
from tests.support.readers.ledger import assert_completed_once, ledger_by_key
from tests.support.readers.operations import make_due, operation, wait_for_state

OPERATIONS = 1000
CLIENT_THREADS = 8
# Generous provider timeout: a lookup that timed out under load would be rescheduled by the
# backoff, past the end of a `--once` pass.
WORKER_SETTINGS = {"PAYMENTS_PROVIDER_TIMEOUT_S": "10", "PAYMENTS_LEASE_S": "30"}


def _create_unknown_operations(
    api: Process, tenant: TenantHandle, account_id: str
) -> tuple[list[str], float]:
    """POST OPERATIONS payments whose answers the provider loses; the operation ids and the
    seconds it took."""
    assert api.url is not None
    url = api.url
    local = threading.local()
    clients: list[httpx.Client] = []

    def post(_: int) -> httpx.Response:
        http: httpx.Client | None = getattr(local, "http", None)
        if http is None:
            http = httpx.Client(
                base_url=url,
                headers={"Authorization": f"Bearer {tenant.api_key}"},
                timeout=60,
            )
            local.http = http
            clients.append(http)
        body = payment_body(account_id=account_id)
        return http.post("/payments", json=body, headers={"Idempotency-Key": new_key()})

    started = time.perf_counter()
    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        responses = list(pool.map(post, range(OPERATIONS)))
    seconds = time.perf_counter() - started
    for http in clients:
        http.close()
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {202: OPERATIONS}, statuses
    return [r.json()["operation_id"] for r in responses], seconds


def test_two_workers_drain_a_thousand_unknown_operations_each_exactly_once(
    spawn: Spawner,
    api: Process,
    tenant: TenantHandle,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
    capsys: pytest.CaptureFixture[str],
) -> None:
    account_id = payment_body()["account_id"]
    faults.add("error_after_commit", account_id=account_id, times=OPERATIONS)
    ids, create_s = _create_unknown_operations(api, tenant, account_id)
    assert faults.remaining() == []
    due = db.execute(
        "UPDATE operations SET next_check_at = now()"
        " WHERE tenant_id = %s AND state = 'UNKNOWN_REQUIRES_RECOVERY'",
        (tenant.id,),
    )
    assert due.rowcount == OPERATIONS

    started = time.perf_counter()
    workers = [spawn.worker(once=True, **WORKER_SETTINGS) for _ in range(2)]
    for worker in workers:
        assert worker.wait_exit(timeout=180) == 0, worker.log()[-5000:]
    drain_s = time.perf_counter() - started

    states = db.execute(
        "SELECT state, count(*) AS n FROM operations WHERE tenant_id = %s GROUP BY state",
        (tenant.id,),
    ).fetchall()
    assert {r["state"]: r["n"] for r in states} == {"COMPLETED": OPERATIONS}

    # Exactly one transition into COMPLETED per operation, made by one of the two workers.
    completions = db.execute(
        "SELECT t.operation_id, t.actor, t.fence, o.fence AS row_fence"
        " FROM operation_transitions t JOIN operations o ON o.id = t.operation_id"
        " WHERE o.tenant_id = %s AND t.to_state = 'COMPLETED'",
        (tenant.id,),
    ).fetchall()
    assert len(completions) == OPERATIONS
    assert {str(c["operation_id"]) for c in completions} == set(ids)
    by_worker = Counter(c["actor"] for c in completions)
    pids = {f":{w.pid}" for w in workers}
    assert all(actor.startswith("worker:") for actor in by_worker), by_worker
    # Both workers did work, side by side: neither drained the backlog alone.
    assert {actor[actor.rindex(":") :] for actor in by_worker} == pids, by_worker
    # Recorded under the fence a worker's claim took (the API held fence 1), and that fence
    # is still the row's: nobody claimed it after the recording owner.
    # Fence 2 everywhere: each operation was claimed exactly once, by one worker, after the
    # API's fence 1; none was taken twice.
    assert {(c["fence"], c["row_fence"]) for c in completions} == {(2, 2)}

    # No fence was ever held by two owners: every audited write under one fence of one
    # operation comes from a single actor.
    shared = db.execute(
        "SELECT t.operation_id, t.fence, array_agg(DISTINCT t.actor) AS actors"
        " FROM operation_transitions t JOIN operations o ON o.id = t.operation_id"
        " WHERE o.tenant_id = %s GROUP BY t.operation_id, t.fence"
        " HAVING count(DISTINCT t.actor) > 1",
        (tenant.id,),
    ).fetchall()
    assert shared == []

    ledger = ledger_by_key(faults)
    payments = db.execute(
        "SELECT provider_key, status, provider_charge_id FROM payments WHERE tenant_id = %s",
        (tenant.id,),
    ).fetchall()
    assert len(payments) == OPERATIONS
    for payment in payments:
        charges = ledger.get(payment["provider_key"], [])
        assert len(charges) == 1, payment
        assert payment["status"] == "SUCCEEDED"
        assert payment["provider_charge_id"] == charges[0]["charge_id"]
    assert sum(1 for c in faults.charges(account_id=account_id)) == OPERATIONS

    with capsys.disabled():
        counts = ", ".join(f"{actor}: {n}" for actor, n in sorted(by_worker.items()))
        print(
            f"\n[throughput] created {OPERATIONS} unknown operations in {create_s:.2f} s"
            f" ({OPERATIONS / create_s:.0f}/s through the API, {CLIENT_THREADS} clients);"
            f" two --once workers drained them in {drain_s:.2f} s wall"
            f" ({OPERATIONS / drain_s:.0f} operations/s, process start included);"
            f" per worker: {counts}"
        )


def test_client_retries_racing_two_workers_complete_the_operation_once(
    database_url: str,
    spawn: Spawner,
    tenant: TenantHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    retries = 8
    key, body = new_key(), payment_body()
    faults.add("drop_after_commit", account_id=body["account_id"])
    accepted = post_payment(client, body, key=key)
    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    # Whoever takes the operation over (a retry or a worker) holds it for three seconds after
    # finding the charge, so the others meet an owner at work even on a loaded machine.
    hold = {"PAYMENTS_FAILPOINTS": "before_record=3"}
    racing_api = spawn.api(**hold)
    assert racing_api.url is not None
    url = racing_api.url
    # The operation becomes due for the workers the moment the retries are released.
    start = threading.Barrier(retries, action=lambda: make_due(db, operation_id))

    def retry(_: int) -> httpx.Response:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {tenant.api_key}"}, timeout=60
        ) as http:
            start.wait(timeout=30)
            return post_payment(http, body, key=key)

    workers = [spawn.worker(once=False, **FAST_WORKER, **hold) for _ in range(2)]
    for worker in workers:
        wait_connected(worker, database_url)
    with ThreadPoolExecutor(retries) as pool:
        answers = list(pool.map(retry, range(retries)))

    wait_for_state(db, operation_id, "COMPLETED", "FAILED")
    stored = operation(db, operation_id)
    # Each retry either reconciled inline, replayed the stored answer, found an owner at
    # work (409) or found the outcome still unknown (202); none is a second outcome.
    assert {a.status_code for a in answers} <= {201, 202, 409}, [a.text for a in answers]
    # They raced: some met the owner at work.
    assert 409 in {a.status_code for a in answers}, [a.status_code for a in answers]
    for answer in answers:
        if answer.status_code == 201:
            assert answer.text == stored["response_body"]
        else:
            assert answer.json()["operation_id"] == operation_id
    assert_completed_once(db, faults, operation_id)
    replay = post_payment(client, body, key=key)
    assert (replay.status_code, replay.text) == (201, stored["response_body"])
