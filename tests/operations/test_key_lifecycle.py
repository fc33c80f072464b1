"""The key lifecycle at each boundary: replay, expired with a tombstone, released.

The processes run with short TTLs set through the environment; each test moves its
operation's creation time back past a boundary instead of waiting for the clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.system import start_api, start_worker
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client

KEY_TTL_S = 600
TOMBSTONE_TTL_S = 1200


@pytest.fixture(scope="module")
def ttl_env(base_env: dict[str, str]) -> dict[str, str]:
    return {
        **base_env,
        "PAYMENTS_KEY_TTL_S": str(KEY_TTL_S),
        "PAYMENTS_TOMBSTONE_TTL_S": str(TOMBSTONE_TTL_S),
    }


@pytest.fixture(scope="module")
def ttl_api(work_dir: Path, ttl_env: dict[str, str]) -> Iterator[Process]:
    process = start_api(work_dir / "logs", ttl_env)
    yield process
    process.stop()


@pytest.fixture
def ttl_client(ttl_api: Process, tenant: TenantHandle) -> Iterator[httpx.Client]:
    with api_client(ttl_api, tenant) as http:
        yield http


def _age(db: psycopg.Connection[DictRow], operation_id: str, seconds: int) -> None:
    """Move the operation `seconds` into the past, as if that much time had passed: its
    payment, its key's row, audit rows and events name its day too, so they move with it."""
    db.execute(
        "WITH aged AS (UPDATE operations SET created_at = now() - make_interval(secs => %s), "
        "completed_at = CASE WHEN completed_at IS NULL THEN NULL "
        "ELSE now() - make_interval(secs => %s) END WHERE id = %s RETURNING id, created_at), "
        "paid AS (UPDATE payments AS p SET created_at = aged.created_at"
        " FROM aged WHERE p.operation_id = aged.id), "
        "trail AS (UPDATE operation_transitions AS t SET operation_created_at = aged.created_at"
        " FROM aged WHERE t.operation_id = aged.id), "
        "keyed AS (UPDATE idempotency_keys AS k SET operation_created_at = aged.created_at"
        " FROM aged WHERE k.operation_id = aged.id) "
        "UPDATE events AS e SET operation_created_at = aged.created_at"
        " FROM aged WHERE e.operation_id = aged.id",
        (seconds, seconds, operation_id),
    )


def _run_worker_once(work_dir: Path, env: dict[str, str]) -> None:
    worker = start_worker(work_dir / "logs", env, once=True)
    assert worker.wait_exit(timeout=60) == 0, worker.log()


def _row(db: psycopg.Connection[DictRow], operation_id: str) -> DictRow:
    row = db.execute(
        "SELECT idempotency_key, response_body, response_status, response_expired_at, "
        "key_released_at, state FROM operations WHERE id = %s",
        (operation_id,),
    ).fetchone()
    assert row is not None
    return row


def test_key_walks_through_replay_tombstone_and_release(
    ttl_client: httpx.Client,
    db: psycopg.Connection[DictRow],
    faults: FaultInjector,
    work_dir: Path,
    ttl_env: dict[str, str],
) -> None:
    key, body = new_key(), payment_body()
    first = post_payment(ttl_client, body, key=key)
    operation_id = first.json()["operation_id"]

    # Just before the key TTL: the stored answer is replayed, even after an expire pass.
    _age(db, operation_id, KEY_TTL_S - 30)
    _run_worker_once(work_dir, ttl_env)
    replay = post_payment(ttl_client, body, key=key)
    assert replay.status_code == 201
    assert replay.content == first.content
    assert _row(db, operation_id)["response_body"] is not None

    # Past the key TTL: refused as expired at once, whether or not the job has run yet.
    _age(db, operation_id, KEY_TTL_S + 30)
    expired = post_payment(ttl_client, body, key=key)
    assert expired.status_code == 422
    assert expired.json()["code"] == "IDEMPOTENCY_KEY_EXPIRED"
    assert expired.json()["operation_id"] == operation_id
    different = post_payment(ttl_client, {**body, "amount": "99.00"}, key=key)
    assert different.json()["code"] == "IDEMPOTENCY_KEY_EXPIRED"

    # The expire job drops the body and keeps the tombstone.
    _run_worker_once(work_dir, ttl_env)
    row = _row(db, operation_id)
    assert row["response_body"] is None
    assert row["response_expired_at"] is not None
    assert row["idempotency_key"] == key
    assert row["response_status"] == 201
    tombstone = post_payment(ttl_client, body, key=key)
    assert tombstone.json()["code"] == "IDEMPOTENCY_KEY_EXPIRED"
    operation = ttl_client.get(f"/operations/{operation_id}").json()
    assert operation["result"] == {"status_code": 201, "body": None}
    assert len(faults.charges(account_id=body["account_id"])) == 1

    # Past the tombstone TTL: the key is released and may name a new payment.
    _age(db, operation_id, TOMBSTONE_TTL_S + 30)
    _run_worker_once(work_dir, ttl_env)
    row = _row(db, operation_id)
    assert row["idempotency_key"] is None
    assert row["key_released_at"] is not None
    assert row["state"] == "COMPLETED"
    again = post_payment(ttl_client, body, key=key)
    assert again.status_code == 201
    assert again.json()["operation_id"] != operation_id
    assert len(faults.charges(account_id=body["account_id"])) == 2
    old = ttl_client.get(f"/operations/{operation_id}").json()
    assert old["idempotency_key"] is None
    assert old["history"][-1]["to_state"] == "COMPLETED"


def test_operations_whose_outcome_is_unknown_never_expire(
    ttl_client: httpx.Client,
    db: psycopg.Connection[DictRow],
    faults: FaultInjector,
    work_dir: Path,
    ttl_env: dict[str, str],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    accepted = post_payment(ttl_client, body, key=key)
    assert accepted.status_code == 202
    operation_id = accepted.json()["operation_id"]
    # Far older than both TTLs, and not due for a recovery check during this test.
    _age(db, operation_id, TOMBSTONE_TTL_S * 2)
    db.execute(
        "UPDATE operations SET next_check_at = now() + interval '1 hour' WHERE id = %s",
        (operation_id,),
    )

    _run_worker_once(work_dir, ttl_env)

    row = _row(db, operation_id)
    assert row["idempotency_key"] == key
    assert row["response_expired_at"] is None
    assert row["state"] == "UNKNOWN_REQUIRES_RECOVERY"
    retry = post_payment(ttl_client, body, key=key)
    assert retry.status_code == 201, retry.text
    assert retry.json()["operation_id"] == operation_id
    # The TTL counts from the outcome, not the request: a late outcome still replays.
    replay = post_payment(ttl_client, body, key=key)
    assert replay.status_code == 201
    assert replay.headers["idempotent-replayed"] == "true"
    assert len(faults.charges(account_id=body["account_id"])) == 1
