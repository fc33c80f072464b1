"""Events: one per final outcome, written with it, listed in order, scoped to the tenant."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from app.events.outbox import outcome_event
from app.events.rows import EventType
from app.operations import repository as operations
from app.operations.states import State
from app.operations.values import OwnedRef, Schedule
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER, PROVIDER_AUTH
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant
from tests.support.factories.webhooks import create_endpoint, endpoint_uuid
from tests.support.fixtures.repository import AsyncDb
from tests.support.readers.operations import make_due, operation, wait_for_state

Db = psycopg.Connection[DictRow]


def events_of(client: httpx.Client, **params: Any) -> dict[str, Any]:
    response = client.get("/events", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_each_final_outcome_has_its_event_with_the_payment(client: httpx.Client) -> None:
    paid = post_payment(client, key=new_key())
    declined = post_payment(
        client, payment_body(account_id="acc_decline_insufficient_funds"), key=new_key()
    )
    rejected = post_payment(client, payment_body(account_id="acc_reject"), key=new_key())
    assert (paid.status_code, declined.status_code, rejected.status_code) == (201, 402, 502)

    events = events_of(client)["data"]
    assert [e["type"] for e in events] == [
        "payment.succeeded",
        "payment.declined",
        "payment.failed",
    ]
    succeeded = events[0]
    assert succeeded["id"].startswith("evt_")
    assert set(succeeded) == {"id", "type", "created_at", "tenant", "data"}
    # The event carries the payment as GET /payments shows it.
    assert succeeded["data"] == client.get(f"/payments/{paid.json()['payment_id']}").json()
    assert events[1]["data"]["status"] == "DECLINED"
    assert events[1]["data"]["decline_code"] == "insufficient_funds"
    assert events[2]["data"]["status"] == "FAILED"
    assert client.get(f"/events/{succeeded['id']}").json() == succeeded


def test_a_replay_adds_no_event(client: httpx.Client) -> None:
    key = new_key()
    body = payment_body()
    assert post_payment(client, body, key=key).status_code == 201
    assert post_payment(client, body, key=key).headers["idempotent-replayed"] == "true"
    assert len(events_of(client)["data"]) == 1


def test_the_feed_pages_in_order(client: httpx.Client) -> None:
    for _ in range(5):
        assert post_payment(client, key=new_key()).status_code == 201
    everything = events_of(client)["data"]
    assert len(everything) == 5
    first = events_of(client, limit=2)
    assert first["has_more"] is True
    second = events_of(client, limit=2, after=first["data"][-1]["id"])
    third = events_of(client, limit=2, after=second["data"][-1]["id"])
    assert third["has_more"] is False
    assert first["data"] + second["data"] + third["data"] == everything


def test_events_are_the_tenants_own(api: Process, client: httpx.Client, db: Db) -> None:
    assert post_payment(client, key=new_key()).status_code == 201
    event = events_of(client)["data"][0]
    with api_client(api, make_tenant(db, "other")) as other:
        assert other.get(f"/events/{event['id']}").status_code == 404
        assert events_of(other)["data"] == []
        refused = other.get("/events", params={"after": event["id"]})
        assert refused.status_code == 422
        assert refused.json()["code"] == "VALIDATION_ERROR"


def test_bad_event_ids_are_answered_clearly(client: httpx.Client) -> None:
    for bad in ("nope", "evt_" + "z" * 32, "evt_", str(uuid.uuid4())):
        assert client.get(f"/events/{bad}").status_code == 404
        assert client.get("/events", params={"after": bad}).status_code == 422
        assert client.post(f"/events/{bad}/redeliver").status_code == 404
    for limit in ("0", "101", "x"):
        assert client.get("/events", params={"limit": limit}).status_code == 422


def test_an_event_never_appears_behind_a_readers_position(
    client: httpx.Client, tenant: TenantHandle, database_url: str
) -> None:
    """An event whose transaction took its place first but commits last is not skipped.

    A transaction writes an event and stays open; a later payment's outcome commits. The
    feed must not show the later event yet: a reader would move past it and never see the
    first one.
    """
    first = post_payment(client, key=new_key()).json()["operation_id"]
    held = psycopg.connect(database_url)
    try:
        # An outcome's event insert, in a transaction left open.
        held.execute(
            "INSERT INTO events (id, tenant_id, type, operation_id, data, operation_created_at)"
            " SELECT %s, %s, 'payment.needs_attention', id, '{}', created_at FROM operations"
            " WHERE id = %s",
            (uuid.uuid4(), tenant.id, first),
        )
        assert post_payment(client, key=new_key()).status_code == 201
        seen = events_of(client)["data"]
        assert [e["type"] for e in seen] == ["payment.succeeded"]
        held.commit()
    finally:
        held.close()
    later = events_of(client, after=seen[-1]["id"])["data"]
    # Nothing was skipped: the held event comes before the later payment's.
    assert [e["type"] for e in later] == ["payment.needs_attention", "payment.succeeded"]


def test_needs_attention_is_emitted_once_and_only_with_a_landed_write(
    async_db: AsyncDb, client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    key = new_key()
    operation_id = uuid.UUID(post_payment(client, key=key, headers={}).json()["operation_id"])
    # Put it back in flight, as a worker holding it would find it.
    put_back = db.execute(
        "UPDATE operations SET state = 'PROVIDER_REQUEST_SENT', fence = 5 WHERE id = %s"
        " RETURNING created_at",
        (operation_id,),
    ).fetchone()
    assert put_back is not None
    created_at = put_back["created_at"]
    db.execute("DELETE FROM events WHERE operation_id = %s", (operation_id,))
    flagged = Schedule(attempts=10, delay_s=60, needs_attention=True)

    async def lose(fence: int, state: State) -> OwnedRef | None:
        async with async_db.db.connection() as conn:
            return await operations.mark_unknown(
                conn,
                OwnedRef(operation_id, tenant.id, created_at, fence, state, 9),
                actor="test",
                reason="still unknown",
                schedule=flagged,
                event=outcome_event(
                    tenant_id=tenant.id, type=EventType.PAYMENT_NEEDS_ATTENTION, data={}
                ),
            )

    # A stale owner (wrong fence) writes nothing, the event included.
    assert async_db.run(lose(4, State.PROVIDER_REQUEST_SENT)) is None
    assert events_of(client)["data"] == []
    assert async_db.run(lose(5, State.PROVIDER_REQUEST_SENT)) is not None
    assert async_db.run(lose(5, State.UNKNOWN_REQUIRES_RECOVERY)) is not None
    types = [e["type"] for e in events_of(client)["data"]]
    assert types == ["payment.needs_attention"]


def test_concurrent_outcomes_each_have_one_event(api: Process, tenant: TenantHandle) -> None:
    async def pay(http: httpx.AsyncClient) -> int:
        response = await http.post(
            "/payments", json=payment_body(), headers={"Idempotency-Key": new_key()}
        )
        return response.status_code

    async def run() -> list[int]:
        headers = {"Authorization": f"Bearer {tenant.api_key}"}
        async with httpx.AsyncClient(base_url=str(api.url), headers=headers, timeout=30) as http:
            return await asyncio.gather(*(pay(http) for _ in range(40)))

    assert asyncio.run(run()) == [201] * 40
    with api_client(api, tenant) as client:
        seen: list[str] = []
        after = None
        while True:
            page = events_of(client, limit=7, **({"after": after} if after else {}))
            seen += [e["data"]["payment_id"] for e in page["data"]]
            if not page["has_more"]:
                break
            after = page["data"][-1]["id"]
    assert len(seen) == len(set(seen)) == 40


def test_a_flagged_operation_emits_needs_attention_once_then_its_outcome(
    spawn: Spawner, client: httpx.Client, faults: FaultInjector, db: Db
) -> None:
    """Recovery flags the operation (one event however many checks fail after), and when
    the provider answers again the outcome's own event follows. Each fans out to the
    tenant's endpoint, in the statement that writes it, as an outcome's does."""
    endpoint = create_endpoint(client, "http://127.0.0.1:9/hook")
    body = payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    faults.add("lookup_unavailable", account_id=body["account_id"], times=1000)
    accepted = post_payment(client, body, key=new_key())
    assert accepted.status_code == 202
    operation_id = accepted.json()["operation_id"]
    make_due(db, operation_id)
    spawn.worker(once=False, **FAST_WORKER, PAYMENTS_MAX_ATTEMPTS="1")

    def checked_past_the_flag() -> bool:
        return int(operation(db, operation_id)["attempts"]) >= 3

    wait_until(checked_past_the_flag, message="several failed checks")
    [flagged] = events_of(client)["data"]
    assert flagged["type"] == "payment.needs_attention"
    assert flagged["data"]["status"] == "PENDING"
    assert flagged["data"]["operation_id"] == operation_id

    faults.clear()
    wait_for_state(db, operation_id, "COMPLETED")
    types = [e["type"] for e in events_of(client)["data"]]
    assert types == ["payment.needs_attention", "payment.succeeded"]
    delivered = db.execute(
        "SELECT ev.type FROM webhook_deliveries AS d JOIN events AS ev ON ev.id = d.event_id"
        " WHERE d.endpoint_id = %s ORDER BY ev.seq",
        (endpoint_uuid(endpoint),),
    ).fetchall()
    assert [row["type"] for row in delivered] == types


def test_each_refund_outcome_has_its_event_with_the_refund(
    client: httpx.Client, provider: Process
) -> None:
    payment = post_payment(client, key=new_key()).json()
    refunds = f"/payments/{payment['payment_id']}/refunds"
    refunded = client.post(refunds, json={"amount": "4.00"}, headers={"Idempotency-Key": new_key()})
    assert refunded.status_code == 201, refunded.text
    # Refunded behind the service's back: the provider refuses the next refund as too much.
    direct = httpx.post(
        f"{provider.url}/refunds",
        json={"charge_id": payment["provider_charge_id"], "amount_minor": 500},
        headers={"Idempotency-Key": new_key(), **PROVIDER_AUTH},
    )
    assert direct.status_code == 201, direct.text
    refused = client.post(refunds, json={"amount": "5.00"}, headers={"Idempotency-Key": new_key()})
    assert refused.status_code == 502, refused.text

    events = events_of(client)["data"]
    assert [e["type"] for e in events] == ["payment.succeeded", "refund.succeeded", "refund.failed"]
    # The event carries the refund as GET /refunds shows it.
    assert events[1]["data"] == client.get(f"/refunds/{refunded.json()['refund_id']}").json()
    assert events[2]["data"]["refund_id"] == refused.json()["refund_id"]
    assert events[2]["data"]["status"] == "FAILED"
