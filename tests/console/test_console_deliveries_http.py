"""Redelivery and the failed deliveries page in the console, over plain HTTP.

A redelivery needs the session's CSRF token and a confirmation, like recheck and resolve;
until both, nothing is queued. The failed page needs a session and lists the delivery
until it is redelivered.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.console.test_console_http import _csrf, _login
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS
from tests.support.control.waiting import wait_until
from tests.support.factories.operators import AdminHandle
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.webhooks import create_endpoint

Db = psycopg.Connection[DictRow]


def _status(db: Db, endpoint_id: str) -> str:
    row = db.execute(
        "SELECT status FROM webhook_deliveries WHERE endpoint_id = %s",
        (uuid.UUID(hex=endpoint_id.removeprefix("we_")),),
    ).fetchone()
    assert row is not None
    return str(row["status"])


def test_redelivery_asks_first_needs_the_csrf_token_and_clears_the_failure(
    api: Process,
    spawn: Spawner,
    tmp_path: Path,
    admin: AdminHandle,
    client: httpx.Client,
    db: Db,
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    receiver.mode("fail")
    endpoint = create_endpoint(client, receiver.url)
    worker = spawn.worker(once=False, **FAST_WEBHOOKS, PAYMENTS_WEBHOOK_MAX_AGE_S="1")
    paid = post_payment(client, payment_body(), key=new_key())
    assert paid.status_code == 201
    wait_until(lambda: _status(db, endpoint["id"]) == "failed", timeout=60, message="failed")
    # No worker from here on: what the console queues stays pending, to be seen.
    worker.stop()
    event_id = client.get("/events").json()["data"][0]["id"]
    operation_id = paid.json()["operation_id"]

    with httpx.Client(base_url=str(api.admin_url)) as anonymous:
        assert anonymous.get("/console/deliveries/failed").headers["location"] == "/console/login"

    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        failed_page = http.get("/console/deliveries/failed")
        assert failed_page.status_code == 200
        assert f"/console/operations/{operation_id}#deliveries" in failed_page.text
        page = http.get(f"/console/operations/{operation_id}")
        assert event_id in page.text
        assert receiver.url in page.text
        action = f"/console/events/{event_id}/redeliver"
        form = {"operation": operation_id, "confirmed": "yes"}

        forged = http.post(action, data={**form, "csrf": "forged"})
        assert forged.headers["location"] == "/console/login"
        assert _status(db, endpoint["id"]) == "failed"

        csrf = _csrf(page.text)
        confirm = http.post(action, data={**form, "csrf": csrf, "confirmed": ""})
        assert confirm.status_code == 200
        assert "Yes, redeliver" in confirm.text
        assert _status(db, endpoint["id"]) == "failed"

        unknown = http.post(
            f"/console/events/evt_{uuid.uuid4().hex}/redeliver", data={**form, "csrf": csrf}
        )
        assert unknown.status_code == 404
        assert "NOT_FOUND" in unknown.text

        done = http.post(action, data={**form, "csrf": csrf})
        assert done.status_code == 303
        location = done.headers["location"]
        assert location == f"/console/operations/{operation_id}?done=redelivered#deliveries"
        assert _status(db, endpoint["id"]) == "pending"
        assert "Redelivery queued." in http.get(location).text
        assert (
            f"/console/operations/{operation_id}#"
            not in http.get("/console/deliveries/failed").text
        )
