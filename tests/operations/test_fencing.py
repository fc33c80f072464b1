"""Fencing: an owner that lost its lease can never write over the newer owner's work.

A real worker is paused (SIGSTOP) while it holds an operation, past its lease; a second
worker takes the operation over and completes it; when the first resumes, its late write is
refused by the fence. At the repository level, concurrent take-overs of one operation have
exactly one winner, a stale owner cannot end the new owner's lease, and every send renews
the owner's lease.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
from psycopg.rows import DictRow

from app.operations import leases, reads
from app.operations import repository as operations
from app.operations.states import State, Trigger
from app.operations.values import OwnedRef, Schedule
from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.factories.payments import new_key, payment_body, post_in_background, post_payment
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb, StaleClaim
from tests.support.readers.ledger import assert_completed_once
from tests.support.readers.operations import (
    make_due,
    operation,
    payment_for,
    transitions,
    wait_for_key_state,
    wait_lease_expired,
    wait_owned_by,
)

STORED = ("state", "fence", "response_status", "response_headers", "response_body", "completed_at")


def test_worker_paused_past_its_lease_cannot_overwrite_the_new_owners_result(
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    accepted = post_payment(client, body, key=key)
    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    make_due(db, operation_id)

    # A holds the operation for a few seconds after finding the charge, before recording.
    paused = spawn.worker(
        once=True,
        PAYMENTS_LEASE_S="2",
        PAYMENTS_PROVIDER_TIMEOUT_S="1",
        PAYMENTS_FAILPOINTS="before_record=3",
    )
    held = wait_owned_by(db, operation_id, paused)
    paused.signal(signal.SIGSTOP)
    wait_lease_expired(db, operation_id)

    newer = spawn.worker(once=True)
    assert newer.wait_exit(timeout=60) == 0, newer.log()
    completed = operation(db, operation_id)
    assert completed["state"] == "COMPLETED"
    assert completed["fence"] > held["fence"]
    payment = payment_for(db, operation_id)

    paused.signal(signal.SIGCONT)
    assert paused.wait_exit(timeout=60) == 0, paused.log()

    after = operation(db, operation_id)
    assert {c: after[c] for c in STORED} == {c: completed[c] for c in STORED}
    assert payment_for(db, operation_id) == payment
    history = transitions(db, operation_id)
    assert not [t for t in history if t["actor"].endswith(f":{paused.pid}")], history
    completion, _ = assert_completed_once(db, faults, operation_id)
    assert completion["actor"].endswith(f":{newer.pid}")
    assert completion["fence"] == after["fence"] > held["fence"]
    # Taken over only once A's lease had run out, by the database clock.
    assert completion["created_at"] >= held["lease_expires_at"]
    replay = post_payment(client, body, key=key)
    assert replay.status_code == 201
    assert replay.text == after["response_body"]


def test_api_request_paused_past_its_lease_answers_with_the_workers_result(
    background: ThreadPoolExecutor,
    spawn: Spawner,
    tenant: TenantHandle,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    # The API claims (RECEIVED and PROVIDER_REQUEST_SENT in one commit), then holds 3 s
    # before sending; paused there, it outlives its lease.
    api = spawn.api(
        PAYMENTS_LEASE_S="2", PAYMENTS_PROVIDER_TIMEOUT_S="1", PAYMENTS_FAILPOINTS="after_claim=3"
    )
    key, body = new_key(), payment_body()
    answer = post_in_background(background, api, tenant, key, body)
    claimed = wait_for_key_state(db, tenant, key, "PROVIDER_REQUEST_SENT")
    api.signal(signal.SIGSTOP)
    operation_id = claimed["id"]
    wait_lease_expired(db, operation_id)
    worker = spawn.worker(once=True)
    assert worker.wait_exit(timeout=60) == 0, worker.log()
    completed = operation(db, operation_id)
    assert completed["state"] == "COMPLETED"
    api.signal(signal.SIGCONT)
    late = answer.result(timeout=60)

    # Its request reached the provider late, after the worker's resend: the provider
    # deduplicated it under the same derived key. Its write was fenced out, and it answered
    # with the worker's stored result.
    assert late.status_code == 201, late.text
    assert late.json() == json.loads(completed["response_body"])
    history = transitions(db, operation_id)
    assert [(t["to_state"], t["trigger"]) for t in history] == [
        ("RECEIVED", "claim"),
        ("PROVIDER_REQUEST_SENT", "send"),
        ("PROVIDER_REQUEST_SENT", "resend"),
        ("COMPLETED", "complete"),
    ]
    assert all(t["actor"].startswith("api:") for t in history[:2]), history
    assert all(t["actor"].endswith(f":{worker.pid}") for t in history[2:]), history
    assert operation(db, operation_id)["fence"] == completed["fence"] == 2
    assert_completed_once(db, faults, operation_id)


def test_a_fenced_out_request_waking_after_its_key_expired_is_told_so(
    background: ThreadPoolExecutor,
    spawn: Spawner,
    tenant: TenantHandle,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    # The late request's answer would be the newer owner's stored one, but the expire job
    # dropped it: the request is told the key expired, not answered 500.
    api = spawn.api(
        PAYMENTS_LEASE_S="2", PAYMENTS_PROVIDER_TIMEOUT_S="1", PAYMENTS_FAILPOINTS="after_claim=3"
    )
    key, body = new_key(), payment_body()
    answer = post_in_background(background, api, tenant, key, body)
    operation_id = wait_for_key_state(db, tenant, key, "PROVIDER_REQUEST_SENT")["id"]
    api.signal(signal.SIGSTOP)
    wait_lease_expired(db, operation_id)
    newer = spawn.worker(once=True)
    assert newer.wait_exit(timeout=60) == 0, newer.log()
    assert operation(db, operation_id)["state"] == "COMPLETED"

    # A day and more later (the key TTL), the worker's expire job drops the stored answer.
    db.execute(
        "UPDATE operations SET completed_at = now() - interval '2 days' WHERE id = %s",
        (operation_id,),
    )
    expirer = spawn.worker(once=True)
    assert expirer.wait_exit(timeout=60) == 0, expirer.log()
    assert operation(db, operation_id)["response_body"] is None

    api.signal(signal.SIGCONT)
    late = answer.result(timeout=60)
    assert late.status_code == 422, late.text
    assert late.json()["code"] == "IDEMPOTENCY_KEY_EXPIRED"
    assert late.json()["operation_id"] == str(operation_id)
    assert_completed_once(db, faults, operation_id)


def test_concurrent_take_overs_of_one_operation_have_exactly_one_winner(
    async_db: AsyncDb, stale_claim: StaleClaim, db: psycopg.Connection[DictRow]
) -> None:
    contenders = 8
    for _ in range(5):
        operation_id = stale_claim()

        async def take_over(owner: str, operation_id: uuid.UUID = operation_id) -> OwnedRef | None:
            async with async_db.db.transaction() as conn:
                snapshot = await reads.get_snapshot(conn, operation_id, key_ttl_s=86400)
            assert snapshot is not None
            async with async_db.db.transaction() as conn:
                return await leases.take_over(conn, snapshot, owner=owner, lease_s=30)

        async def race() -> list[OwnedRef | None]:
            return list(await asyncio.gather(*(take_over(f"c{i}") for i in range(contenders))))

        results = async_db.run(race())
        winners = [(i, r) for i, r in enumerate(results) if r is not None]
        row = operation(db, operation_id)
        # Every contender read fence 1; only one could move it to 2.
        assert len(winners) == 1, results
        index, ref = winners[0]
        assert (ref.fence, row["fence"], row["lease_owner"]) == (2, 2, f"c{index}")


def test_a_stale_owner_cannot_end_the_new_owners_lease(
    async_db: AsyncDb,
    stale_claim: StaleClaim,
    tenant: TenantHandle,
    db: psycopg.Connection[DictRow],
) -> None:
    operation_id = stale_claim()
    stale = OwnedRef(
        id=operation_id,
        tenant_id=tenant.id,
        created_at=operation(db, operation_id)["created_at"],
        fence=1,
        state=State.PROVIDER_REQUEST_SENT,
        attempts=0,
    )

    async def take_over_then_stale_write() -> tuple[OwnedRef | None, OwnedRef | None]:
        async with async_db.db.transaction() as conn:
            snapshot = await reads.get_snapshot(conn, operation_id, key_ttl_s=86400)
            assert snapshot is not None
            owned = await leases.take_over(conn, snapshot, owner="worker:new", lease_s=30)
        # Recording an outcome ends the writer's lease; from a stale owner it must not land.
        async with async_db.db.transaction() as conn:
            written = await operations.mark_unknown(
                conn,
                stale,
                actor="api:stale",
                reason="woke up late",
                schedule=Schedule(attempts=1, delay_s=0, needs_attention=False),
            )
        return owned, written

    owned, written = async_db.run(take_over_then_stale_write())
    assert owned is not None
    assert written is None
    row = operation(db, operation_id)
    assert (row["lease_owner"], row["fence"], row["lease_expired"]) == ("worker:new", 2, False)


def test_every_send_renews_the_owners_lease(
    async_db: AsyncDb, stale_claim: StaleClaim, db: psycopg.Connection[DictRow]
) -> None:
    # A recovery owner looks up, then resends: two provider calls in one ownership. The
    # lease it took must not be half spent when the resend starts.
    operation_id = stale_claim()

    async def take_over_then_send() -> OwnedRef | None:
        async with async_db.db.transaction() as conn:
            snapshot = await reads.get_snapshot(conn, operation_id, key_ttl_s=86400)
            assert snapshot is not None
            owned = await leases.take_over(conn, snapshot, owner="worker:w", lease_s=1)
        assert owned is not None
        async with async_db.db.transaction() as conn:
            return await operations.mark_sent(
                conn, owned, Trigger.RESEND, actor="worker:w", lease_s=60
            )

    sent = async_db.run(take_over_then_send())
    assert sent is not None
    row = db.execute(
        "SELECT state, lease_owner, lease_expires_at - now() > interval '50 seconds' AS renewed"
        " FROM operations WHERE id = %s",
        (operation_id,),
    ).fetchone()
    assert row == {"state": "PROVIDER_REQUEST_SENT", "lease_owner": "worker:w", "renewed": True}
