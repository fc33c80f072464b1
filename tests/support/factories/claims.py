"""A payment's claim made straight through the repository, as the API's claim makes it: for
tests that need an operation in a state without a request to the API."""

from __future__ import annotations

import uuid

from app.db.database import Connection
from app.operations import repository as operations
from app.operations.values import Claimed, Snapshot, SubjectWrite

NAME = "create_payment"
FINGERPRINT = "0" * 64
KEY_TTL_S = 86400


async def claim_payment(
    conn: Connection,
    *,
    tenant_id: uuid.UUID,
    operation_id: uuid.UUID,
    key: str,
    owner: str = "api:first",
    lease_s: float = 30,
    subject: SubjectWrite | None = None,
    send_reason: str | None = None,
) -> Claimed | Snapshot | None:
    """`operations.claim` of a payment's key, with a fixed fingerprint and a day's key TTL."""
    return await operations.claim(
        conn,
        operation_id=operation_id,
        tenant_id=tenant_id,
        operation_name=NAME,
        idempotency_key=key,
        fingerprint=FINGERPRINT,
        owner=owner,
        lease_s=lease_s,
        key_ttl_s=KEY_TTL_S,
        subject=subject,
        send_reason=send_reason,
    )
