"""A delivery whose attempt raises is a failed attempt: recorded, backed off, never stuck.

Before, an exception the sender did not foresee (a non-ASCII host's UnicodeEncodeError)
went past `send`, nothing was recorded, and the delivery stayed due at the head of the
queue, claimed again at every lease: enough of them took every worker's slots.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from app.events.reads import EventRow
from app.webhooks.deliveries import MAX_ERROR_LENGTH, Claimed, stored_error
from app.webhooks.sender import WebhookSender
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS
from tests.support.control.waiting import wait_until
from tests.support.factories.tenants import TenantHandle
from tests.support.factories.webhooks import backlog, create_endpoint, endpoint_uuid
from tests.support.readers.webhooks import delivery_rows

Db = psycopg.Connection[DictRow]
# Deliveries queued one after another once the first has failed, each claimed after it.
PROBES = 3

# Retries far enough apart to see one attempt and its backoff before the next.
SLOW_RETRIES = {
    **FAST_WEBHOOKS,
    "PAYMENTS_WEBHOOK_BACKOFF_BASE_S": "60",
    "PAYMENTS_WEBHOOK_BACKOFF_MAX_S": "120",
}


def _one_failed_attempt(db: Db, endpoint: dict[str, Any]) -> dict[str, Any]:
    def attempted() -> bool:
        return any(row["attempt_count"] for row in delivery_rows(db, endpoint))

    wait_until(attempted, timeout=30, message="an attempt to be recorded")
    [delivery] = delivery_rows(db, endpoint)
    return delivery


def _assert_backed_off(db: Db, tenant_id: uuid.UUID, endpoint: dict[str, Any], error: str) -> None:
    delivery = _one_failed_attempt(db, endpoint)
    assert delivery["status"] == "pending"
    assert delivery["lease_owner"] is None
    # The first retry's delay is drawn from the upper half of the 60 s ceiling.
    assert 20 < float(delivery["backoff_s"]) <= 60
    [attempt] = delivery["attempts"]
    assert attempt["succeeded"] is False
    assert attempt["status_code"] is None
    assert attempt["error"].startswith(error), attempt["error"]
    # Later claims, each of which would take it first if it were due again (it is the
    # endpoint's oldest), take only deliveries queued after it: it is not claimed again.
    for probes in range(2, 2 + PROBES):
        backlog(db, tenant_id, endpoint, 1, "payment.succeeded")

        def probe_attempted(count: int = probes) -> bool:
            rows = delivery_rows(db, endpoint)
            return len(rows) == count and rows[-1]["attempt_count"] > 0

        wait_until(probe_attempted, timeout=30, message="a later delivery to be attempted")
    [again, *_] = delivery_rows(db, endpoint)
    assert again["id"] == delivery["id"]
    assert again["attempt_count"] == 1


def test_a_send_that_raises_is_a_failed_attempt_that_backs_off(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    endpoint = create_endpoint(client, receiver.url)
    backlog(db, tenant.id, endpoint, 1, "payment.succeeded")
    spawn.worker(once=False, **SLOW_RETRIES, PAYMENTS_FAILPOINTS="webhook_send=raise")

    _assert_backed_off(
        db, tenant.id, endpoint, "internal error: FailpointError: failpoint webhook_send"
    )
    assert receiver.records() == []


def test_an_exception_in_the_worker_after_the_send_is_a_failed_attempt(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    endpoint = create_endpoint(client, receiver.url)
    backlog(db, tenant.id, endpoint, 1, "payment.succeeded")
    spawn.worker(once=False, **SLOW_RETRIES, PAYMENTS_FAILPOINTS="webhook_before_record=raise")

    _assert_backed_off(db, tenant.id, endpoint, "internal error: FailpointError")
    # Sent, but not known to be recorded as sent: it will be sent again (at least once). The
    # later deliveries were sent once each.
    assert len(receiver.answered()) == 1 + PROBES


def test_an_endpoint_stored_with_a_non_ascii_host_is_delivered(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    """A URL stored before hosts were normalised (fullwidth `localhost`) is normalised when
    it is sent, where it used to raise UnicodeEncodeError and stay at the queue's head."""
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    endpoint = create_endpoint(client, receiver.url)
    fullwidth = "".join(chr(ord(ch) + 0xFEE0) for ch in "localhost")
    db.execute(
        "UPDATE webhook_endpoints SET url = %s WHERE id = %s",
        (f"http://{fullwidth}:{receiver.port}/hook", endpoint_uuid(endpoint)),
    )
    backlog(db, tenant.id, endpoint, 1, "payment.succeeded")
    worker = spawn.worker(once=True, **SLOW_RETRIES)
    assert worker.wait_exit(timeout=60) == 0, worker.log()[-3000:]

    [delivery] = delivery_rows(db, endpoint)
    assert delivery["status"] == "succeeded", delivery
    assert receiver.answered()[0]["headers"]["host"] == f"localhost:{receiver.port}"


def _claimed(url: str) -> Claimed:
    event = EventRow(uuid.uuid4(), uuid.uuid4(), "payment.succeeded", {}, datetime.now(UTC))
    return Claimed(uuid.uuid4(), 1, 0, uuid.uuid4(), url, ["whsec_" + "A" * 44], event)


def test_send_turns_any_exception_into_a_failed_attempt() -> None:
    def explode(request: httpx.Request) -> httpx.Response:
        raise KeyError("nobody expected this")

    async def attempt() -> tuple[int | None, str | None]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(explode)) as http:
            sender = WebhookSender(http, timeout_s=2, allow_local=True)
            result = await sender.send(_claimed("http://127.0.0.1:9/hook"))
        return result.status_code, result.error

    assert asyncio.run(attempt()) == (None, "internal error: KeyError: 'nobody expected this'")


def test_an_error_is_stored_without_nul_and_at_most_1000_characters() -> None:
    assert stored_error("bad\x00byte") == "badbyte"
    assert stored_error("lone \ud800") == "lone \\ud800"
    long = stored_error("x\x00" * 5000)
    assert long == "x" * MAX_ERROR_LENGTH
    assert MAX_ERROR_LENGTH == 1000
