"""Webhook deliveries for operators, against the real API, a real worker and real receivers.

- the operation's detail carries its events, each with its deliveries (endpoint, status,
  attempts, the last attempt's status code, error and latency, the next attempt);
- the failed list shows, across tenants and newest first, what gave up after its window;
- redelivering through the admin API is the tenant's own redelivery, for any tenant: the
  receiver gets the same event again and the delivery leaves the failed list;
- the new routes take only admin tokens, the tenant's redeliver route no admin token, and
  bad ids and cursors are clear 4xx problems that change nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.webhooks import create_endpoint

Db = psycopg.Connection[DictRow]


def _detail(admin_client: httpx.Client, operation_id: str) -> dict[str, Any]:
    answer = admin_client.get(f"/admin/operations/{operation_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _deliveries_by_url(detail: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [event] = detail["events"]
    return {d["url"]: d for d in event["deliveries"]}


def _failed(admin_client: httpx.Client) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 100}
    while True:
        page = admin_client.get("/admin/webhook-deliveries/failed", params=params)
        assert page.status_code == 200, page.text
        found.extend(page.json()["data"])
        if not page.json()["has_more"]:
            return found
        params["after"] = found[-1]["id"]


def test_detail_shows_deliveries_and_an_operator_redelivers_a_failed_one(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, admin_client: httpx.Client
) -> None:
    good = spawn.receiver(tmp_path / "good.jsonl")
    bad = spawn.receiver(tmp_path / "bad.jsonl")
    gone = spawn.receiver(tmp_path / "gone.jsonl")
    bad.mode("fail")
    gone.mode("fail")
    good_endpoint = create_endpoint(client, good.url)
    bad_endpoint = create_endpoint(client, bad.url)
    gone_endpoint = create_endpoint(client, gone.url)
    # A retry window of 1 s: the failing receiver's delivery gives up after a few attempts.
    worker = spawn.worker(once=False, **FAST_WEBHOOKS, PAYMENTS_WEBHOOK_MAX_AGE_S="1")
    paid = post_payment(client, payment_body(), key=new_key())
    assert paid.status_code == 201
    operation_id = paid.json()["operation_id"]

    def settled() -> bool:
        found = _deliveries_by_url(_detail(admin_client, operation_id))
        return len(found) == 3 and all(d["status"] != "pending" for d in found.values())

    wait_until(settled, timeout=60, message="the deliveries settled")
    # The tenant deletes the endpoint that failed: nobody can act on its delivery any more.
    assert client.delete(f"/webhook-endpoints/{gone_endpoint['id']}").status_code == 204
    detail = _detail(admin_client, operation_id)
    [event] = detail["events"]
    assert event["id"] == client.get("/events").json()["data"][0]["id"]
    assert event["type"] == "payment.succeeded"
    assert event["created_at"].endswith("Z")
    delivered = _deliveries_by_url(detail)
    ok, failed = delivered[good.url], delivered[bad.url]
    assert ok["endpoint_id"] == good_endpoint["id"]
    assert (ok["status"], ok["attempt_count"], ok["next_attempt_at"]) == ("succeeded", 1, None)
    assert ok["last_attempt"]["status_code"] == 200
    assert ok["last_attempt"]["error"] is None
    assert ok["last_attempt"]["latency_ms"] >= 0
    assert failed["endpoint_id"] == bad_endpoint["id"]
    assert (failed["status"], failed["next_attempt_at"]) == ("failed", None)
    assert failed["attempt_count"] == len(bad.records()) >= 1
    assert failed["last_attempt"]["status_code"] == 500
    assert failed["completed_at"] is not None
    assert failed["endpoint_deleted"] is False

    listed = _failed(admin_client)
    mine = [f for f in listed if f["id"] == failed["id"]]
    assert len(mine) == 1
    assert mine[0]["operation_id"] == operation_id
    assert mine[0]["event_id"] == event["id"]
    assert mine[0]["event_type"] == "payment.succeeded"
    assert mine[0]["tenant_id"] == detail["tenant_id"]
    assert ok["id"] not in {f["id"] for f in listed}
    deleted = delivered[gone.url]
    assert (deleted["status"], deleted["endpoint_deleted"]) == ("failed", True)
    assert deleted["id"] not in {f["id"] for f in listed}
    times = [f["completed_at"] for f in listed]
    assert times == sorted(times, reverse=True)

    bad.mode("ok")
    queued = admin_client.post(f"/admin/events/{event['id']}/redeliver")
    assert queued.status_code == 202, queued.text
    # Both live endpoints' deliveries had ended, so both get the event again; the deleted
    # endpoint gets nothing.
    assert queued.json() == {"event_id": event["id"], "deliveries_queued": 2}
    wait_until(lambda: len(bad.answered()) == 1, timeout=60, message="the redelivery")
    wait_until(settled, timeout=60, message="the redeliveries settled")
    assert len(gone.records()) == deleted["attempt_count"]
    again = _deliveries_by_url(_detail(admin_client, operation_id))
    assert again[bad.url]["status"] == "succeeded"
    assert again[bad.url]["last_attempt"]["status_code"] == 200
    assert again[bad.url]["attempt_count"] == failed["attempt_count"] + 1
    # The same event: its id is the webhook-id every time.
    ids = {r["headers"]["webhook-id"] for r in bad.records() + good.records()}
    assert ids == {event["id"]}
    assert failed["id"] not in {f["id"] for f in _failed(admin_client)}
    # Off the list, it is no cursor any more: a clear 422, not a silently empty page.
    stale = admin_client.get("/admin/webhook-deliveries/failed", params={"after": failed["id"]})
    assert stale.status_code == 422
    assert stale.json()["code"] == "VALIDATION_ERROR"
    assert worker.alive()


def test_the_new_routes_take_only_admin_tokens_and_refuse_bad_ids(
    api: Process, client: httpx.Client, admin_client: httpx.Client, db: Db
) -> None:
    paid = post_payment(client, payment_body(), key=new_key())
    assert paid.status_code == 201
    event_id = client.get("/events").json()["data"][0]["id"]
    before = db.execute("SELECT count(*) AS n FROM webhook_deliveries").fetchone()

    tenant_key = {"Authorization": str(client.headers["authorization"])}
    with (
        httpx.Client(base_url=str(api.admin_url)) as anonymous,
        httpx.Client(base_url=str(api.admin_url), headers=tenant_key) as as_tenant,
    ):
        for http in (as_tenant, anonymous):
            refused = http.post(f"/admin/events/{event_id}/redeliver")
            assert refused.status_code == 401
            assert refused.json()["code"] == "UNAUTHENTICATED"
            assert http.get("/admin/webhook-deliveries/failed").status_code == 401
    # The tenant's own route (on the tenants' port) takes no admin token.
    admin_key = {"Authorization": str(admin_client.headers["authorization"])}
    with httpx.Client(base_url=str(api.url), headers=admin_key) as as_admin:
        assert as_admin.post(f"/events/{event_id}/redeliver").status_code == 401

    for bad in ("nope", "evt_" + "0" * 32, "evt_" + "z" * 32, event_id + "0"):
        missing = admin_client.post(f"/admin/events/{bad}/redeliver")
        assert missing.status_code == 404, bad
        assert missing.json()["code"] == "NOT_FOUND"
    for params in ({"after": "wd_nope"}, {"limit": "0"}, {"limit": "101"}, {"state": "x"}):
        invalid = admin_client.get("/admin/webhook-deliveries/failed", params=params)
        assert invalid.status_code == 422, params
        assert invalid.json()["code"] == "VALIDATION_ERROR"
    after = db.execute("SELECT count(*) AS n FROM webhook_deliveries").fetchone()
    assert after == before

    # With no endpoint subscribed, a redelivery queues nothing, and says so.
    queued = admin_client.post(f"/admin/events/{event_id}/redeliver")
    assert queued.status_code == 202
    assert queued.json() == {"event_id": event_id, "deliveries_queued": 0}
    detail = _detail(admin_client, paid.json()["operation_id"])
    assert [(e["id"], e["deliveries"]) for e in detail["events"]] == [(event_id, [])]
