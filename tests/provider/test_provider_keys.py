"""The merchant's key across real processes: a wrong one charges nothing and fails the payment
definitely; a rotation (the provider takes old and new, the service moves, the old goes)
loses no payment; no process logs a key.

The rotation runs on a fake provider of its own, restarted on its port with its ledger to
change the keys it takes, as a provider's dashboard would change them.
"""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.tracing.exporter import read_spans
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process, free_port
from tests.support.control.spawner import Spawner
from tests.support.control.system import PROVIDER_KEY, start_worker
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.operations import make_due, payment_for

Db = psycopg.Connection[DictRow]

OLD = f"sk_test_{secrets.token_hex(16)}"
NEW = f"sk_test_{secrets.token_hex(16)}"
WRONG = f"sk_test_{secrets.token_hex(16)}"


def assert_no_key_in(process: Process, *keys: str) -> None:
    log = process.log()
    for key in keys:
        assert key not in log, f"{process.name} logged a provider key"


def test_an_api_with_a_wrong_key_fails_the_payment_and_charges_nothing(
    spawn: Spawner, tenant: TenantHandle, faults: FaultInjector, db: Db
) -> None:
    api = spawn.api(PAYMENTS_PROVIDER_API_KEY=WRONG)
    body = payment_body()

    with api_client(api, tenant) as client:
        refused = post_payment(client, body, key=new_key())

    # Definite: the provider refused before reading the charge. Not 202 (unknown), not 503.
    assert refused.status_code == 502, refused.text
    problem = refused.json()
    assert problem["code"] == "PROVIDER_REJECTED"
    payment = payment_for(db, problem["operation_id"])
    assert payment["status"] == "FAILED"
    assert payment["attempt"] == 0
    assert faults.charges(account_id=body["account_id"]) == []
    assert "refused the service's credentials (401" in api.log()
    assert_no_key_in(api, WRONG, PROVIDER_KEY)


def test_a_worker_sends_the_key_and_logs_none(
    client: httpx.Client, faults: FaultInjector, db: Db, base_env: dict[str, str], work_dir: Path
) -> None:
    body = payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    lost = post_payment(client, body, key=new_key())
    assert lost.status_code == 202, lost.text
    make_due(db, lost.json()["operation_id"])

    worker = start_worker(work_dir / "logs", base_env, once=True)
    assert worker.wait_exit(timeout=60) == 0, worker.log()

    # Its lookup was answered: the provider took the key it sent.
    assert payment_for(db, lost.json()["operation_id"])["status"] == "SUCCEEDED"
    assert_no_key_in(worker, PROVIDER_KEY)


def test_no_span_of_the_api_or_the_provider_carries_a_key(
    spawn: Spawner, tmp_path: Path, tenant: TenantHandle
) -> None:
    trace_file = tmp_path / "spans.jsonl"
    traced = {"OTEL_BSP_SCHEDULE_DELAY": "100", "PAYMENTS_TRACE_FILE": str(trace_file)}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    keys = {"PAYMENTS_FAKE_PROVIDER_KEYS": f"acme:{OLD}"}
    spawn.provider(tmp_path / "traced.sqlite3", port=port, env={**traced, **keys})
    api = spawn.api(PAYMENTS_PROVIDER_URL=url, PAYMENTS_PROVIDER_API_KEY=OLD, **traced)

    with api_client(api, tenant) as client:
        paid = post_payment(client, payment_body(), key=new_key())
    refused = httpx.post(
        f"{url}/charges", headers={"Authorization": f"Bearer {WRONG}"}, json={}, timeout=10
    )

    assert paid.status_code == 201, paid.text
    assert refused.status_code == 401

    def both_traced() -> bool:
        names = {(s["service"], s["name"]) for s in read_spans(trace_file)}
        return {("fake-provider", "POST /charges"), ("payments-api", "provider charge")} <= names

    wait_until(both_traced, timeout=10, message="the payment's spans at the API and provider")
    written = trace_file.read_text()
    assert OLD not in written
    assert WRONG not in written


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "rotating.sqlite3"


class Rotation:
    """A provider of its own on a fixed port, restarted with other keys on the same ledger."""

    def __init__(self, spawn: Spawner, ledger: Path) -> None:
        self.spawn, self.ledger, self.port = spawn, ledger, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.provider: Process | None = None

    def take(self, *keys: str) -> None:
        if self.provider is not None:
            self.provider.stop()
        entries = ",".join(f"acme:{key}" for key in keys)
        self.provider = self.spawn.provider(
            self.ledger, port=self.port, env={"PAYMENTS_FAKE_PROVIDER_KEYS": entries}
        )

    def api(self, key: str) -> Process:
        return self.spawn.api(PAYMENTS_PROVIDER_URL=self.url, PAYMENTS_PROVIDER_API_KEY=key)

    def charges(self) -> list[dict[str, Any]]:
        return FaultInjector(self.url).charges()


@pytest.fixture
def rotation(spawn: Spawner, ledger: Path) -> Rotation:
    return Rotation(spawn, ledger)


def pay(api: Process, tenant: TenantHandle, count: int) -> list[httpx.Response]:
    def one(_: int) -> httpx.Response:
        with api_client(api, tenant) as client:
            return post_payment(client, payment_body(), key=new_key())

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, range(count)))


def test_a_key_rotation_loses_no_payment(rotation: Rotation, tenant: TenantHandle, db: Db) -> None:
    rotation.take(OLD)
    old_api = rotation.api(OLD)
    answers = pay(old_api, tenant, 10)
    # One payment's answer is lost before the rotation; it is settled after it.
    lost_body, lost_key = payment_body(), new_key()
    FaultInjector(rotation.url).add("error_after_commit", account_id=lost_body["account_id"])
    with api_client(old_api, tenant) as client:
        lost = post_payment(client, lost_body, key=lost_key)
    assert lost.status_code == 202, lost.text

    # The window: the provider takes both keys; the service is moved over, its old and new
    # processes serving at once, then the old one is stopped.
    rotation.take(OLD, NEW)
    answers += pay(old_api, tenant, 10)
    new_api = rotation.api(NEW)
    with ThreadPoolExecutor(max_workers=2) as pool:
        both = [pool.submit(pay, api, tenant, 10) for api in (old_api, new_api)]
        for batch in both:
            answers += batch.result()
    old_api.stop()

    # The old key is revoked: the service, on the new one, goes on.
    rotation.take(NEW)
    answers += pay(new_api, tenant, 10)
    with api_client(new_api, tenant) as client:
        settled = post_payment(client, lost_body, key=lost_key)
    with httpx.Client(base_url=rotation.url, timeout=10) as http:
        revoked = http.get(
            "/charges",
            params={"idempotency_key": "payment-0"},
            headers={"Authorization": f"Bearer {OLD}"},
        )

    assert [a.status_code for a in answers] == [201] * 50, [a.text for a in answers]
    assert {a.json()["status"] for a in answers} == {"SUCCEEDED"}
    # The lost answer, found by a lookup made with the new key: charged once, never twice.
    assert settled.status_code == 201, settled.text
    assert settled.json()["status"] == "SUCCEEDED"
    charges = rotation.charges()
    by_id = {c["charge_id"]: c for c in charges}
    made = [a.json()["provider_charge_id"] for a in [*answers, settled]]
    assert len(set(made)) == 51
    assert set(made) == set(by_id)
    for answer in answers:
        payment = payment_for(db, answer.json()["operation_id"])
        assert by_id[payment["provider_charge_id"]]["idempotency_key"] == payment["provider_key"]
    assert revoked.status_code == 401
    for process in rotation.spawn.started:
        assert_no_key_in(process, OLD, NEW)
