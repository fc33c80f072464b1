"""A capture's or void's claim keeps its payment locked from its checks to its statement.

"One capture or void in flight, never beyond what is left, never once the hold lapsed" is
decided over the payment as the lock read it (`app/authorizations/repository.py`); were the
lock let go after the read (each statement its own transaction), a void could be claimed
between a capture's checks and its claim. `test_races.py` shows what the lock prevents by
racing requests; here the claim is held at its statement and the lock is looked at.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.waiting import wait_until
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.payments import new_key
from tests.support.factories.tenants import TenantHandle

# Another transaction's claim of the request's own key, not committed: the key's row and its
# operation, as the claim writes them. The claim's insert of the key's row (`ON CONFLICT
# ... DO NOTHING` on the key table's primary key) waits until it is decided.
_HOLD_THE_KEY = """
    WITH held AS (
        INSERT INTO idempotency_keys (tenant_id, operation_name, idempotency_key,
                                      operation_id, operation_created_at)
        VALUES (%(tenant)s, %(name)s, %(key)s, %(id)s, now())
        RETURNING operation_id, operation_created_at
    )
    INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                            state, lease_owner, lease_expires_at, created_at)
    SELECT operation_id, %(tenant)s, %(name)s, %(key)s, %(fingerprint)s,
           'PROVIDER_REQUEST_SENT', 'test:holder', now() + interval '1 minute',
           operation_created_at
    FROM held
"""
_WAITING = """
    SELECT count(*) AS waiting FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock'
"""


def _capture(client: httpx.Client, payment_id: str, key: str) -> httpx.Response:
    return post_capture(client, payment_id, "1.00", key=key)


def _void(client: httpx.Client, payment_id: str, key: str) -> httpx.Response:
    return post_void(client, payment_id, key=key)


@pytest.mark.parametrize(
    ("operation", "post"),
    [("capture_payment", _capture), ("void_payment", _void)],
    ids=["capture", "void"],
)
def test_the_payment_stays_locked_until_the_claims_statement(
    client: httpx.Client,
    db: psycopg.Connection[DictRow],
    database_url: str,
    tenant: TenantHandle,
    operation: str,
    post: Callable[[httpx.Client, str, str], httpx.Response],
) -> None:
    payment = authorized(client)
    key = new_key()
    with psycopg.connect(database_url) as holder, ThreadPoolExecutor(max_workers=1) as pool:
        holder.execute(
            _HOLD_THE_KEY,
            {
                "id": uuid.uuid4(),
                "tenant": tenant.id,
                "name": operation,
                "key": key,
                "fingerprint": "0" * 64,
            },
        )
        answer = pool.submit(post, client, payment["payment_id"], key)

        def claim_waits() -> bool:
            row = db.execute(_WAITING).fetchone()
            return row is not None and row["waiting"] > 0

        wait_until(claim_waits, message="the claim waiting on the held key")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            db.execute(
                "SELECT 1 FROM payments WHERE id = %s FOR NO KEY UPDATE NOWAIT",
                (payment["payment_id"],),
            )
        holder.rollback()
        made = answer.result(timeout=30)
    assert made.status_code == 201, made.text
