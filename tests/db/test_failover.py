"""The primary dies under load and the synchronous standby is promoted.

Clients keep sending payments through the API while a worker runs; the primary's machine
dies (every PostgreSQL process SIGKILLed), and a moment later the standby is promoted. The
API and the worker reach the database only through the multi-host URL, so nobody restarts
them or tells them which server is now the primary.

Afterwards: every `201` a client received is still there (a synchronous standby loses no
acknowledged commit), every other request retried with its key ends `201` with exactly one
charge, no answer was `500`, and the worker settles an unknown outcome on its own.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from app.db.migrate import upgrade_head
from tests.conftest import TEST_PROVIDER_TIMEOUT_S
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.replication import ReplicatedPostgres, replicated_postgres
from tests.support.control.system import start_api, start_worker
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant

CLIENTS = 4
# Connecting to a host, and waiting for a pooled connection, give up after this long.
CONNECT_TIMEOUT_S = 2
# No request may take longer: a pool wait, a connection attempt per host, the provider call.
SLOWEST_ANSWER_S = 3 * CONNECT_TIMEOUT_S + float(TEST_PROVIDER_TIMEOUT_S) + 1


@dataclass
class Sent:
    key: str
    body: dict[str, object]
    status: int | None
    seconds: float
    payment_id: str | None = None


@dataclass
class Traffic:
    """Every request sent and its answer (None: the connection failed)."""

    sent: list[Sent] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def count(self, status: int | None) -> int:
        with self.lock:
            return sum(1 for s in self.sent if s.status == status)

    def send_until_stopped(self, client: httpx.Client) -> None:
        while not self.stop.is_set():
            key, body = new_key(), payment_body()
            started = time.monotonic()
            try:
                response = client.post("/payments", json=body, headers={"Idempotency-Key": key})
            except httpx.TransportError:
                sent = Sent(key, body, None, time.monotonic() - started)
            else:
                payment_id = response.json().get("payment_id") if response.is_success else None
                seconds = time.monotonic() - started
                sent = Sent(key, body, response.status_code, seconds, payment_id)
                if response.status_code == 503:
                    # The documented retry signal: present on every 503.
                    assert response.headers.get("retry-after"), response.text
            with self.lock:
                self.sent.append(sent)


@pytest.fixture
def pair() -> Iterator[ReplicatedPostgres]:
    with replicated_postgres() as servers:
        upgrade_head(servers.url)
        yield servers


def test_primary_killed_under_load_and_standby_promoted(
    pair: ReplicatedPostgres,
    base_env: dict[str, str],
    work_dir: Path,
    faults: FaultInjector,
) -> None:
    with psycopg.connect(pair.url, autocommit=True, row_factory=dict_row) as conn:
        tenant: TenantHandle = make_tenant(conn)
    env = {
        **base_env,
        "DATABASE_URL": pair.url,
        "PAYMENTS_RECONCILE_INTERVAL_S": "0.5",
        "PAYMENTS_BACKOFF_BASE_S": "0.5",
        "PAYMENTS_BACKOFF_MAX_S": "1",
        "PAYMENTS_DB_CONNECT_TIMEOUT_S": str(CONNECT_TIMEOUT_S),
    }
    logs = work_dir / "logs"
    api: Process = start_api(logs, env)
    worker: Process = start_worker(logs, env)
    wait_until(lambda: "worker started" in worker.log(), message="the worker to start")
    traffic = Traffic()
    try:
        with api_client(api, tenant) as client:
            senders = [
                threading.Thread(target=traffic.send_until_stopped, args=(client,))
                for _ in range(CLIENTS)
            ]
            for sender in senders:
                sender.start()
            try:
                wait_until(lambda: traffic.count(201) >= 30, message="traffic flowing")
                pair.kill_primary()
                # The failover manager notices and promotes; meanwhile requests fail cleanly.
                wait_until(
                    lambda: traffic.count(503) >= 3 * CLIENTS, message="503s while no primary"
                )
                pair.promote_standby()
                served = traffic.count(201)
                wait_until(
                    lambda: traffic.count(201) >= served + 30,
                    timeout=30,
                    message="new payments served by the promoted standby",
                )
            finally:
                traffic.stop.set()
                for sender in senders:
                    sender.join(timeout=60)

            statuses = Counter(s.status for s in traffic.sent)
            # Never a 500, never a dropped connection: only answers a client knows how to take.
            assert set(statuses) <= {201, 202, 409, 503}, statuses
            assert api.alive()
            assert worker.alive()
            # Nobody hung on the dead primary: every answer came within the timeouts.
            slowest = max(s.seconds for s in traffic.sent)
            assert slowest < SLOWEST_ANSWER_S, slowest

            # Every acknowledged payment survived the failover.
            for sent in traffic.sent:
                if sent.status == 201:
                    read = client.get(f"/payments/{sent.payment_id}")
                    assert read.status_code == 200, (sent, read.text)
                    assert read.json()["status"] == "SUCCEEDED"

            # Everything else converges when retried with its key.
            for sent in traffic.sent:
                if sent.status != 201:
                    _retry_until_created(client, sent)

            # The worker resumed on its own: an unknown outcome is settled with no retry.
            body = payment_body()
            faults.add("drop_after_commit", account_id=body["account_id"])
            lost = client.post("/payments", json=body, headers={"Idempotency-Key": new_key()})
            assert lost.status_code == 202, lost.text
            operation_id = lost.json()["operation_id"]

            def settled() -> bool:
                state: str = client.get(f"/operations/{operation_id}").json()["state"]
                return state == "COMPLETED"

            wait_until(settled, timeout=30, message="the worker to settle the lost answer")
            # The outage was logged as such, never as a crash of a request or a job.
            assert "Traceback" not in api.log()
            assert "Traceback" not in worker.log()
    finally:
        api.stop()
        worker.stop()

    _assert_charged_exactly_once(pair, tenant, traffic, faults, extra=1)


def _retry_until_created(client: httpx.Client, sent: Sent) -> None:
    def created() -> bool:
        response = client.post(
            "/payments",
            json=sent.body,
            headers={"Idempotency-Key": sent.key, "Prefer": "wait=5"},
        )
        assert response.status_code != 500, response.text
        return response.status_code == 201

    wait_until(created, timeout=40, interval=0.2, message=f"key {sent.key} to settle")


def _assert_charged_exactly_once(
    pair: ReplicatedPostgres,
    tenant: TenantHandle,
    traffic: Traffic,
    faults: FaultInjector,
    *,
    extra: int,
) -> None:
    with psycopg.connect(pair.url, autocommit=True, row_factory=dict_row) as conn:
        # The promoted standby is the primary now; the old one is gone.
        assert conn.execute("SELECT pg_is_in_recovery() AS r").fetchone() == {"r": False}
        rows = conn.execute(
            "SELECT provider_key, status, account_id, provider_charge_id"
            " FROM payments WHERE tenant_id = %s",
            (tenant.id,),
        ).fetchall()
    assert len(rows) == len(traffic.sent) + extra
    charges = faults.charges()
    ledger = {c["idempotency_key"]: c for c in charges}
    per_account = Counter(c["account_id"] for c in charges)
    for row in rows:
        assert row["status"] == "SUCCEEDED"
        assert ledger[row["provider_key"]]["charge_id"] == row["provider_charge_id"]
        assert per_account[row["account_id"]] == 1


@pytest.mark.long  # a primary and a standby of its own: `python3 tasks.py test-long`
def test_an_outcome_cut_off_by_the_failover_is_recovered_like_a_crash(
    pair: ReplicatedPostgres,
    base_env: dict[str, str],
    work_dir: Path,
    faults: FaultInjector,
) -> None:
    # The provider has charged, the API is about to record the outcome, and the primary
    # dies: the record fails, and nobody can tell the client what happened yet.
    with psycopg.connect(pair.url, autocommit=True, row_factory=dict_row) as conn:
        tenant: TenantHandle = make_tenant(conn)
    env = {
        **base_env,
        "DATABASE_URL": pair.url,
        "PAYMENTS_DB_CONNECT_TIMEOUT_S": str(CONNECT_TIMEOUT_S),
        "PAYMENTS_FAILPOINTS": "before_record=3",
    }
    api: Process = start_api(work_dir / "logs", env)
    key, body = new_key(), payment_body()
    try:
        with api_client(api, tenant) as client, ThreadPoolExecutor(max_workers=1) as pool:
            first = pool.submit(
                client.post, "/payments", json=body, headers={"Idempotency-Key": key}
            )
            wait_until(
                lambda: len(faults.charges(account_id=body["account_id"])) == 1,
                message="the provider to charge",
            )
            pair.fail_over()
            answer = first.result(timeout=60)
            # Retryable, never a 500 and never a guess at the outcome.
            assert answer.status_code == 503, answer.text
            assert answer.json()["code"] == "SERVICE_UNAVAILABLE"
            assert answer.headers["retry-after"]

            # The claim survived on the standby; the retry takes the operation over once
            # the cut-off owner's lease runs out, finds the charge, and records it.
            retry_headers = {"Idempotency-Key": key, "Prefer": "wait=5"}
            retried = client.post("/payments", json=body, headers=retry_headers)
            for _ in range(12):  # a minute at most: the lease is a few seconds
                if retried.status_code not in (202, 409):
                    break
                retried = client.post("/payments", json=body, headers=retry_headers)
            assert retried.status_code == 201, retried.text
            operation = client.get(f"/operations/{retried.json()['operation_id']}").json()
    finally:
        api.stop()

    charges = faults.charges(account_id=body["account_id"])
    assert len(charges) == 1, charges
    assert retried.json()["provider_charge_id"] == charges[0]["charge_id"]
    # Settled by a new owner (fence 2) that looked the charge up, not by a second charge.
    with psycopg.connect(pair.url, autocommit=True, row_factory=dict_row) as conn:
        completed = conn.execute(
            "SELECT fence, actor FROM operation_transitions"
            " WHERE operation_id = %s AND to_state = 'COMPLETED'",
            (operation["operation_id"],),
        ).fetchall()
    assert len(completed) == 1, completed
    assert completed[0]["fence"] > 1, completed


@pytest.mark.long  # a primary and a standby of its own: `python3 tasks.py test-long`
def test_a_switchover_to_the_standby_with_clients_still_on_the_old_primary(
    pair: ReplicatedPostgres, base_env: dict[str, str], work_dir: Path, faults: FaultInjector
) -> None:
    # The old primary stays up, fenced read-only: pooled connections to it still work but
    # every write fails. They must be replaced, not answered with 500s. Every payment
    # acknowledged before or after must be on the new primary, exactly once.
    with psycopg.connect(pair.url, autocommit=True, row_factory=dict_row) as conn:
        tenant: TenantHandle = make_tenant(conn)
    api: Process = start_api(work_dir / "logs", {**base_env, "DATABASE_URL": pair.url})
    bodies: dict[str, dict[str, str]] = {}  # every key sent, with its request body
    acknowledged: dict[str, httpx.Response] = {}  # every key answered 201, with the answer
    answers: list[int] = []
    try:
        with api_client(api, tenant) as client:

            def send(key: str) -> int:
                response = client.post(
                    "/payments", json=bodies[key], headers={"Idempotency-Key": key}
                )
                assert response.status_code in (201, 503), response.text
                answers.append(response.status_code)
                if response.status_code == 201:
                    acknowledged.setdefault(key, response)
                return response.status_code

            def new_payment() -> int:
                key = new_key()
                bodies[key] = payment_body()
                return send(key)

            for _ in range(5):
                assert new_payment() == 201
            pair.fence_primary()
            pair.promote_standby()
            wait_until(
                lambda: new_payment() == 201, timeout=30, message="payments on the promoted standby"
            )
            # Every key refused with 503 on the way is retried to its 201.
            for key in [k for k in bodies if k not in acknowledged]:

                def retried(key: str = key) -> bool:
                    return send(key) == 201

                wait_until(retried, timeout=30, message=f"{key} retried")
            assert set(acknowledged) == set(bodies)
            # Each acknowledged key is read back through the API: the stored answer, byte
            # for byte, from the new primary.
            for key, first in acknowledged.items():
                replay = client.post(
                    "/payments", json=bodies[key], headers={"Idempotency-Key": key}
                )
                assert replay.status_code == 201, replay.text
                assert replay.headers["idempotent-replayed"] == "true"
                assert replay.content == first.content
            assert "Traceback" not in api.log()
    finally:
        api.stop()
    assert 503 in answers or len(answers) == 6, answers  # the fenced primary was met, or not
    with psycopg.connect(pair.standby.url(), autocommit=True, row_factory=dict_row) as db:
        rows = db.execute(
            "SELECT o.idempotency_key, o.state, p.id, p.status, p.provider_charge_id,"
            " p.provider_key FROM operations o JOIN payments p ON p.operation_id = o.id"
            " WHERE o.tenant_id = %s",
            (tenant.id,),
        ).fetchall()
        total = db.execute(
            "SELECT count(*) AS n FROM payments WHERE tenant_id = %s", (tenant.id,)
        ).fetchone()
    # Exactly one row per key sent, none other, each as its 201 said.
    assert total == {"n": len(bodies)}
    by_key = {r["idempotency_key"]: r for r in rows}
    assert len(rows) == len(by_key) == len(bodies)
    assert set(by_key) == set(bodies)
    for key, first in acknowledged.items():
        row, answer = by_key[key], first.json()
        assert (row["state"], row["status"]) == ("COMPLETED", "SUCCEEDED"), row
        assert (str(row["id"]), row["provider_charge_id"]) == (
            answer["payment_id"],
            answer["provider_charge_id"],
        )
        charges = faults.charges(idempotency_key=row["provider_key"])
        assert [c["charge_id"] for c in charges] == [row["provider_charge_id"]]
