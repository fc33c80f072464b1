"""Recovery of unknown outcomes: by the worker, and inline on a client's retry."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.system import start_api, start_worker
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.operations import transitions


def _make_due(db: psycopg.Connection[DictRow], operation_id: str) -> None:
    """Bring the next check forward, as if the backoff had elapsed."""
    db.execute("UPDATE operations SET next_check_at = now() WHERE id = %s", (operation_id,))


def test_worker_completes_an_unknown_operation_through_a_lookup(
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
    base_env: dict[str, str],
    work_dir: Path,
) -> None:
    key, body = new_key(), payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    accepted = post_payment(client, body, key=key)
    assert accepted.status_code == 202
    operation_id = accepted.json()["operation_id"]
    _make_due(db, operation_id)

    worker = start_worker(work_dir / "logs", base_env, once=True)
    assert worker.wait_exit(timeout=60) == 0, worker.log()

    operation = client.get(f"/operations/{operation_id}").json()
    assert operation["state"] == "COMPLETED"
    assert operation["result"]["status_code"] == 201
    assert operation["history"][-1]["actor"] == "provider"
    assert transitions(db, operation_id)[-1]["actor"].startswith("worker:")
    charges = faults.charges(account_id=body["account_id"])
    assert len(charges) == 1
    replay = post_payment(client, body, key=key)
    assert replay.status_code == 201
    assert replay.json()["provider_charge_id"] == charges[0]["charge_id"]
    assert replay.headers["idempotent-replayed"] == "true"


def test_client_retry_reconciles_inline_and_gets_the_final_answer(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    key, body = new_key(), payment_body()
    faults.add("drop_after_commit", account_id=body["account_id"])
    accepted = post_payment(client, body, key=key)
    assert accepted.status_code == 202

    retry = post_payment(client, body, key=key)

    assert retry.status_code == 201, retry.text
    assert retry.json()["operation_id"] == accepted.json()["operation_id"]
    assert len(faults.charges(account_id=body["account_id"])) == 1
    history = client.get(f"/operations/{accepted.json()['operation_id']}").json()["history"]
    assert [h["to_state"] for h in history][-1] == "COMPLETED"
    assert history[-1]["actor"] == "provider"
    recorded = transitions(db, accepted.json()["operation_id"])
    assert "lookup" in (recorded[-1]["reason"] or "")


def test_timeout_before_commit_then_retry_sends_again_with_the_same_key(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    key, body = new_key(), payment_body()
    faults.add("timeout_before_commit", account_id=body["account_id"], delay_s=4)
    accepted = post_payment(client, body, key=key)
    assert accepted.status_code == 202
    assert faults.charges(account_id=body["account_id"]) == []

    retry = post_payment(client, body, key=key)

    assert retry.status_code == 201, retry.text
    charges = faults.charges(account_id=body["account_id"])
    assert len(charges) == 1
    provider_key = db.execute(
        "SELECT provider_key FROM payments WHERE id = %s", (retry.json()["payment_id"],)
    ).fetchone()
    assert provider_key == {"provider_key": charges[0]["idempotency_key"]}


def test_lookup_unavailable_keeps_the_operation_unknown_without_guessing(
    client: httpx.Client, faults: FaultInjector
) -> None:
    key, body = new_key(), payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    faults.add("lookup_unavailable", account_id=body["account_id"])
    accepted = post_payment(client, body, key=key)
    assert accepted.status_code == 202

    retry = post_payment(client, body, key=key)
    assert retry.status_code == 202, retry.text
    assert retry.json()["state"] == "UNKNOWN_REQUIRES_RECOVERY"
    # The client's retry made a recovery check that settled nothing: it counts.
    assert retry.json()["attempts"] == 1

    final = post_payment(client, body, key=key)
    assert final.status_code == 201, final.text
    assert len(faults.charges(account_id=body["account_id"])) == 1


def test_retry_into_a_stalled_request_takes_it_over_once_its_lease_expired(
    base_env: dict[str, str],
    work_dir: Path,
    api: Process,
    tenant: TenantHandle,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    """The first request's process dies after the claim; a retry finishes the payment."""
    stalled = start_api(work_dir / "logs", {**base_env, "PAYMENTS_FAILPOINTS": "after_claim=60"})
    key, body = new_key(), payment_body()
    try:
        with api_client(stalled, tenant) as doomed, ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(post_payment, doomed, body, key=key)
            wait_until(
                lambda: (
                    db.execute(
                        "SELECT 1 FROM operations WHERE tenant_id = %s AND idempotency_key = %s",
                        (tenant.id, key),
                    ).fetchone()
                    is not None
                ),
                message="the claim",
            )
            stalled.kill()
            with pytest.raises(httpx.TransportError):
                pending.result()
    finally:
        stalled.kill()

    with api_client(api, tenant) as client:
        in_flight = post_payment(client, body, key=key)
        assert in_flight.status_code == 409
        assert faults.charges(account_id=body["account_id"]) == []
        wait_until(
            lambda: (
                db.execute(
                    "SELECT lease_expires_at <= now() AS expired FROM operations "
                    "WHERE tenant_id = %s AND idempotency_key = %s",
                    (tenant.id, key),
                ).fetchone()
                == {"expired": True}
            ),
            message="the dead owner's lease to expire",
        )
        taken_over = post_payment(client, body, key=key)

    assert taken_over.status_code == 201, taken_over.text
    assert len(faults.charges(account_id=body["account_id"])) == 1
    history = [
        (row["to_state"], row["fence"])
        for row in db.execute(
            "SELECT to_state, fence FROM operation_transitions WHERE operation_id = %s ORDER BY id",
            (taken_over.json()["operation_id"],),
        )
    ]
    # The dead request's claim committed PROVIDER_REQUEST_SENT; the retry took over (fence
    # 2), found nothing at the provider and sent it again under the same key.
    assert history == [
        ("RECEIVED", 1),
        ("PROVIDER_REQUEST_SENT", 1),
        ("PROVIDER_REQUEST_SENT", 2),
        ("COMPLETED", 2),
    ]


def test_a_client_retrying_into_failing_lookups_gets_the_operation_flagged(
    spawn: Spawner, tenant: TenantHandle, faults: FaultInjector
) -> None:
    # Retrying faster than the backoff must not keep an operation from needs_attention:
    # every inline check that settles nothing is an attempt, as a worker's would be.
    max_attempts = 3
    api = spawn.api(PAYMENTS_MAX_ATTEMPTS=str(max_attempts))
    key, body = new_key(), payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    faults.add("lookup_unavailable", account_id=body["account_id"], times=max_attempts)
    with api_client(api, tenant) as client:
        assert post_payment(client, body, key=key).status_code == 202
        answers = [post_payment(client, body, key=key) for _ in range(max_attempts)]
        assert [a.status_code for a in answers] == [202] * max_attempts, answers[-1].text
        assert [a.json()["attempts"] for a in answers] == list(range(1, max_attempts + 1))
        assert [a.json()["needs_attention"] for a in answers] == [False, False, True]

        # Lookups work again: the next retry settles it and clears the flag.
        final = post_payment(client, body, key=key)
        assert final.status_code == 201, final.text
        settled = client.get(f"/operations/{final.json()['operation_id']}").json()
    assert (settled["state"], settled["needs_attention"]) == ("COMPLETED", False)
    assert len(faults.charges(account_id=body["account_id"])) == 1
