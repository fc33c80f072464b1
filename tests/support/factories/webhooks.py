"""Webhook endpoints for tests: created through the API, and a backlog of deliveries
written straight to the tables."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.factories.payments import new_key

Db = psycopg.Connection[DictRow]


def create_endpoint(client: httpx.Client, url: str, **extra: Any) -> dict[str, Any]:
    created = client.post("/webhook-endpoints", json={"url": url, **extra})
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


# A backlog written straight to the tables, as the outcome statements write it: an
# operation, its event, and the event's delivery to one endpoint.
_BACKLOG = """
    WITH made AS (
        SELECT g, gen_random_uuid() AS op, gen_random_uuid() AS payment
        FROM generate_series(1, %(n)s) AS g
    ), ops AS (
        INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                                state, fence)
        SELECT op, %(tenant)s, 'create_payment', %(tag)s || g, 'f', 'COMPLETED', 1
        FROM made
        RETURNING id, created_at
    ), ev AS (
        INSERT INTO events (id, tenant_id, type, operation_id, data, operation_created_at)
        SELECT gen_random_uuid(), %(tenant)s, %(type)s, ops.id,
               jsonb_build_object('payment_id', made.payment::text), ops.created_at
        FROM ops JOIN made ON made.op = ops.id
        RETURNING id
    )
    INSERT INTO webhook_deliveries (id, tenant_id, event_id, endpoint_id)
    SELECT gen_random_uuid(), %(tenant)s, id, %(endpoint)s FROM ev
"""


def endpoint_uuid(endpoint: dict[str, Any]) -> uuid.UUID:
    """The database id of an endpoint as the API shows it (`we_` + hex)."""
    return uuid.UUID(hex=str(endpoint["id"]).removeprefix("we_"))


def backlog(db: Db, tenant_id: uuid.UUID, endpoint: dict[str, Any], n: int, type: str) -> None:
    """`n` events of `type` with a pending delivery each to `endpoint`, written directly."""
    endpoint_id = endpoint_uuid(endpoint)
    params = {"tenant": tenant_id, "tag": new_key(), "n": n, "type": type, "endpoint": endpoint_id}
    db.execute(_BACKLOG, params)
