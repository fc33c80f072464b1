"""The leader of a Patroni cluster dies under load; Patroni promotes its synchronous standby.

Three PostgreSQL members run under Patroni on one etcd (`tests/support/control/patroni.py`),
in strict synchronous mode. An API and a worker reach them only through `DATABASE_URL`
naming all three with `target_session_attrs=read-write`. Client threads send payments,
each with its own idempotency key, and retry a key as a client is told to (a `503` or `409`
after its `Retry-After`, a `202` with `Prefer: wait`, a dropped connection at once) until
it is answered `201`. Under that load the leader's machine dies: its Patroni, postmaster and
backends are SIGKILLed together. Nobody tells the service anything.

Afterwards, every payment answered `201` is read back from the new leader with the id and
amount it was acknowledged with (zero acknowledged payments lost), the provider holds
exactly one charge per key, and the load went on after the promotion. The figures (payments
acknowledged, seconds until Patroni promoted and until the service answered `201` again,
`503`s seen) are printed, and docs/operations.md records a run's.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from tests.support.control.faults import FaultInjector
from tests.support.control.patroni import PatroniCluster, missing
from tests.support.control.system import start_api, start_worker
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import api_client, make_tenant
from tests.support.readers.ledger import ledger_by_key

pytestmark = [
    pytest.mark.ha,
    pytest.mark.skipif(missing() is not None, reason=str(missing())),
    pytest.mark.timeout(900),
]
# Starting a process takes long on a loaded machine (two cores, other work running).
START_S = 120

CLIENTS = 6
CONNECT_TIMEOUT_S = 2
# Payments acknowledged before the kill, and after the service answered again.
BEFORE, AFTER = 150, 150
# One key's retries give up after this long (the test then fails on that key).
KEY_DEADLINE_S = 120.0


@dataclass
class Payment:
    key: str
    body: dict[str, str]
    # (sent, answered, status) of every attempt; None: the connection failed.
    answers: list[tuple[float, float, int | None]] = field(default_factory=list)
    payment_id: str | None = None
    acknowledged_at: float | None = None


@dataclass
class Load:
    """Client threads, each sending one key at a time until it is acknowledged."""

    client: httpx.Client
    payments: list[Payment] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def acknowledged(self, since: float = 0.0) -> int:
        with self.lock:
            return sum(1 for p in self.payments if (p.acknowledged_at or -1.0) >= since)

    def answers(self) -> list[tuple[float, float, int | None]]:
        with self.lock:
            return sorted(a for p in self.payments for a in p.answers)

    def back_at(self, killed_at: float) -> float | None:
        """When the first request sent after the outage began (its first failed answer)
        was answered 201."""
        answers = self.answers()
        failures = [sent for sent, _, status in answers if sent > killed_at and status != 201]
        if not failures:
            return None
        return min(
            (done for sent, done, status in answers if sent > failures[0] and status == 201),
            default=None,
        )

    def run(self, thread: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            cents = (thread * 7919 + n * 104729) % 99_900 + 100
            body = payment_body(amount=str(Decimal(cents) / 100))
            payment = Payment(new_key(), body)
            with self.lock:
                self.payments.append(payment)
            try:
                self.send(payment)
            except Exception as error:  # recorded and failed on in the test's thread
                self.errors.append(f"{payment.key}: {error!r}")
                return

    def send(self, payment: Payment) -> None:
        headers = {"Idempotency-Key": payment.key}
        deadline = time.monotonic() + KEY_DEADLINE_S
        while time.monotonic() < deadline:
            sent = time.monotonic()
            try:
                response = self.client.post("/payments", json=payment.body, headers=headers)
            except httpx.TransportError:
                payment.answers.append((sent, time.monotonic(), None))
                continue
            payment.answers.append((sent, time.monotonic(), response.status_code))
            if response.status_code == 201:
                payment.payment_id = response.json()["payment_id"]
                payment.acknowledged_at = time.monotonic()
                return
            if response.status_code in (503, 409):
                # The documented signal: wait what Retry-After says, then the same key again.
                time.sleep(float(response.headers["retry-after"]))
            elif response.status_code == 202:
                headers = {"Idempotency-Key": payment.key, "Prefer": "wait=5"}
            else:
                raise AssertionError(f"answered {response.status_code}: {response.text}")
        raise AssertionError(f"not acknowledged within {KEY_DEADLINE_S} s: {payment.answers}")


def test_the_leader_dies_under_load_and_no_acknowledged_payment_is_lost(
    cluster: PatroniCluster,
    base_env: dict[str, str],
    work_dir: Path,
    faults: FaultInjector,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with psycopg.connect(cluster.url, autocommit=True, row_factory=dict_row) as conn:
        tenant = make_tenant(conn)
    env = {
        **base_env,
        "DATABASE_URL": cluster.url,
        "PAYMENTS_DB_CONNECT_TIMEOUT_S": str(CONNECT_TIMEOUT_S),
        "PAYMENTS_RECONCILE_INTERVAL_S": "0.5",
        "PAYMENTS_BACKOFF_BASE_S": "0.5",
        "PAYMENTS_BACKOFF_MAX_S": "1",
    }
    logs = work_dir / "logs-ha"
    api = start_api(logs, env, timeout=START_S)
    worker = start_worker(logs, env)
    wait_until(
        lambda: "worker started" in worker.log(), timeout=START_S, message="the worker to start"
    )
    try:
        with api_client(api, tenant) as client:
            load = Load(client)
            threads = [threading.Thread(target=load.run, args=(i,)) for i in range(CLIENTS)]
            for thread in threads:
                thread.start()
            try:
                wait_until(lambda: load.acknowledged() >= BEFORE, timeout=300, message="load")
                standby = cluster.sync_standby()
                killed_at = time.monotonic()
                new = cluster.wait_for_new_leader(cluster.kill_leader())
                promoted_s = time.monotonic() - killed_at
                # Strict synchronous mode: commits wait until the third member streams from
                # the new leader as its synchronous standby.
                wait_until(lambda: cluster.healthy(size=2), timeout=120, message="a new standby")
                in_sync_s = time.monotonic() - killed_at
                wait_until(
                    lambda: load.back_at(killed_at) is not None,
                    timeout=120,
                    message="a 201 after the outage",
                )
                served_at = load.back_at(killed_at) or killed_at
                wait_until(
                    lambda: load.acknowledged(served_at) >= AFTER,
                    timeout=300,
                    message="load on the new leader",
                )
            finally:
                load.stop.set()
                for thread in threads:
                    thread.join(timeout=KEY_DEADLINE_S + 30)
            assert not load.errors, load.errors[:5]
            assert not any(t.is_alive() for t in threads)
            # Every key sent was acknowledged in the end, and each read back through the API.
            assert all(p.payment_id for p in load.payments)
            for payment in load.payments:
                read = client.get(f"/payments/{payment.payment_id}")
                assert read.status_code == 200, read.text
        assert api.alive()
        assert worker.alive()
        assert "Traceback" not in api.log()
        assert "Traceback" not in worker.log()
    finally:
        api.stop()
        worker.stop()

    # Patroni promoted the synchronous standby of the moment, never another member.
    assert new.name == standby, (new.name, standby)
    # Every acknowledged payment is on the new leader, as acknowledged, exactly once.
    with psycopg.connect(new.url(cluster.database), autocommit=True, row_factory=dict_row) as db:
        assert db.execute("SELECT pg_is_in_recovery() AS r").fetchone() == {"r": False}
        rows = db.execute(
            "SELECT p.id::text AS id, p.amount_minor, p.status, p.provider_key, o.idempotency_key"
            " FROM payments p JOIN operations o ON o.id = p.operation_id"
            " WHERE p.tenant_id = %s",
            (tenant.id,),
        ).fetchall()
    by_key = {r["idempotency_key"]: r for r in rows}
    assert len(rows) == len(by_key) == len(load.payments)
    lost = [p.key for p in load.payments if p.key not in by_key]
    assert lost == []
    ledger = ledger_by_key(faults)
    for payment in load.payments:
        row = by_key[payment.key]
        assert row["id"] == payment.payment_id
        assert row["amount_minor"] == int(Decimal(payment.body["amount"]) * 100)
        assert row["status"] == "SUCCEEDED"
        assert len(ledger[row["provider_key"]]) == 1, ledger[row["provider_key"]]

    answers = Counter(status for _, _, status in load.answers())
    figures = (
        f"Patroni failover: {len(load.payments)} payments acknowledged, 0 lost, each charged"
        f" once; leader killed after {BEFORE}, promoted {new.name} (the synchronous standby)"
        f" in {promoted_s:.1f} s, with its own synchronous standby after {in_sync_s:.1f} s;"
        f" the service answered 201 again after"
        f" {served_at - killed_at:.1f} s; answers seen: {dict(sorted(answers.items(), key=str))}"
    )
    with capsys.disabled():
        print(f"\n{figures}")
    (work_dir / "ha-failover.txt").write_text(figures + "\n")
