"""What webhook tests read: a recorded request checked by the reference Standard Webhooks
library, and an endpoint's deliveries as stored."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import DictRow
from standardwebhooks.webhooks import Webhook

from tests.support.factories.webhooks import endpoint_uuid

Db = psycopg.Connection[DictRow]


def verified(record: dict[str, Any], secret: str) -> dict[str, Any]:
    """The event in a recorded request, checked by the reference Standard Webhooks library."""
    event: dict[str, Any] = Webhook(secret).verify(record["body"], record["headers"])
    return event


def pending(db: Db, endpoint: dict[str, Any]) -> int:
    """How many of the endpoint's deliveries are pending."""
    endpoint_id = endpoint_uuid(endpoint)
    row = db.execute(
        "SELECT count(*) AS n FROM webhook_deliveries WHERE endpoint_id = %s "
        "AND status = 'pending'",
        (endpoint_id,),
    ).fetchone()
    assert row is not None
    return int(row["n"])


def delivery_rows(db: Db, endpoint: dict[str, Any]) -> list[dict[str, Any]]:
    """The endpoint's deliveries as stored, with `backoff_s` (due in) and their attempts."""
    rows = db.execute(
        "SELECT id, status, attempt_count, lease_owner, last_error, "
        "extract(epoch FROM next_attempt_at - now()) AS backoff_s "
        "FROM webhook_deliveries WHERE endpoint_id = %s ORDER BY created_at",
        (endpoint_uuid(endpoint),),
    ).fetchall()
    for row in rows:
        row["attempts"] = db.execute(
            "SELECT succeeded, status_code, error FROM webhook_attempts "
            "WHERE delivery_id = %s ORDER BY id",
            (row["id"],),
        ).fetchall()
    return rows
