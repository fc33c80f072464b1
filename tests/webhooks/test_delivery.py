"""Delivery to a real receiver process by real workers: signed, retried, isolated.

Signatures are checked with the reference `standardwebhooks` library. A receiver that
answers 500, does not answer in time, or dies mid-request gets the same event again, with
the same id and body.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.receivers import Receiver
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.webhooks import create_endpoint
from tests.support.readers.webhooks import verified

Db = psycopg.Connection[DictRow]


def deliveries(client: httpx.Client, endpoint: dict[str, Any]) -> list[dict[str, Any]]:
    listed = client.get(f"/webhook-endpoints/{endpoint['id']}/deliveries")
    assert listed.status_code == 200, listed.text
    data: list[dict[str, Any]] = listed.json()["data"]
    return data


def wait_settled(client: httpx.Client, endpoint: dict[str, Any], count: int = 1) -> None:
    def settled() -> bool:
        found = deliveries(client, endpoint)
        return len(found) == count and all(d["status"] != "pending" for d in found)

    wait_until(settled, timeout=60, message="deliveries settled")


def test_an_event_is_delivered_signed(spawn: Spawner, tmp_path: Path, client: httpx.Client) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    endpoint = create_endpoint(client, receiver.url)
    spawn.worker(once=False, **FAST_WEBHOOKS)
    paid = post_payment(client, key=new_key())
    assert paid.status_code == 201

    wait_until(lambda: len(receiver.answered()) == 1, message="the webhook")
    record = receiver.answered()[0]
    event = verified(record, endpoint["secret"])
    assert event == client.get(f"/events/{event['id']}").json()
    assert event["type"] == "payment.succeeded"
    assert event["data"]["payment_id"] == paid.json()["payment_id"]
    assert record["headers"]["webhook-id"] == event["id"]
    assert record["headers"]["content-type"] == "application/json"
    wait_settled(client, endpoint)
    [delivery] = deliveries(client, endpoint)
    assert delivery["status"] == "succeeded"
    assert delivery["event_id"] == event["id"]
    assert [a["status_code"] for a in delivery["attempts"]] == [200]
    assert delivery["attempts"][0]["latency_ms"] >= 0


def _assert_same_event_again(receiver: Receiver, secret: str) -> None:
    records = receiver.records()
    assert len(records) >= 2
    ids = {r["headers"]["webhook-id"] for r in records}
    bodies = {r["body"] for r in records}
    assert len(ids) == 1
    assert len(bodies) == 1
    assert records[-1]["status"] == 200
    verified(records[-1], secret)


def test_a_500_is_retried_with_the_same_event(
    spawn: Spawner, tmp_path: Path, client: httpx.Client
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    receiver.mode("fail", times=2)
    endpoint = create_endpoint(client, receiver.url)
    spawn.worker(once=False, **FAST_WEBHOOKS)
    assert post_payment(client, key=new_key()).status_code == 201

    wait_settled(client, endpoint)
    _assert_same_event_again(receiver, endpoint["secret"])
    assert [r["status"] for r in receiver.records()] == [500, 500, 200]
    [delivery] = deliveries(client, endpoint)
    assert delivery["status"] == "succeeded"
    assert [a["status_code"] for a in delivery["attempts"]] == [500, 500, 200]
    assert delivery["attempt_count"] == 3


def test_a_receiver_that_does_not_answer_in_time_gets_it_again(
    spawn: Spawner, tmp_path: Path, client: httpx.Client
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    receiver.mode("hang", times=1)
    endpoint = create_endpoint(client, receiver.url)
    spawn.worker(once=False, **FAST_WEBHOOKS)
    assert post_payment(client, key=new_key()).status_code == 201

    wait_settled(client, endpoint)
    _assert_same_event_again(receiver, endpoint["secret"])
    [delivery] = deliveries(client, endpoint)
    first, last = delivery["attempts"]
    assert first["status_code"] is None
    assert "timed out" in first["error"]
    assert last["status_code"] == 200


def test_a_receiver_that_dies_mid_request_gets_it_again(
    spawn: Spawner, tmp_path: Path, client: httpx.Client
) -> None:
    log = tmp_path / "received.jsonl"
    receiver = spawn.receiver(log)
    receiver.mode("die", times=1)
    endpoint = create_endpoint(client, receiver.url)
    spawn.worker(once=False, **FAST_WEBHOOKS)
    assert post_payment(client, key=new_key()).status_code == 201

    assert receiver.process.wait_exit(timeout=30) == 3
    # Back up on the same port: the retry reaches it.
    again = spawn.receiver(log, port=receiver.port)
    wait_settled(client, endpoint)
    _assert_same_event_again(again, endpoint["secret"])
    [delivery] = deliveries(client, endpoint)
    assert delivery["attempts"][0]["status_code"] is None
    assert delivery["attempts"][-1]["status_code"] == 200


def test_only_subscribed_types_are_sent(
    spawn: Spawner, tmp_path: Path, client: httpx.Client
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    endpoint = create_endpoint(client, receiver.url, event_types=["payment.declined"])
    spawn.worker(once=False, **FAST_WEBHOOKS)
    assert post_payment(client, key=new_key()).status_code == 201
    declined = payment_body(account_id="acc_decline_card_declined")
    assert post_payment(client, declined, key=new_key()).status_code == 402

    wait_settled(client, endpoint)
    assert [verified(r, endpoint["secret"])["type"] for r in receiver.records()] == [
        "payment.declined"
    ]


def test_during_a_rotation_old_and_new_secrets_both_verify(
    spawn: Spawner, tmp_path: Path, client: httpx.Client
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    endpoint = create_endpoint(client, receiver.url)
    rotated = client.post(f"/webhook-endpoints/{endpoint['id']}/rotate-secret").json()
    spawn.worker(once=False, **FAST_WEBHOOKS)
    assert post_payment(client, key=new_key()).status_code == 201

    wait_until(lambda: len(receiver.answered()) == 1, message="the webhook")
    [record] = receiver.answered()
    assert len(record["headers"]["webhook-signature"].split(" ")) == 2
    assert verified(record, endpoint["secret"]) == verified(record, rotated["secret"])


def test_redeliver_sends_the_same_event_again(
    spawn: Spawner, tmp_path: Path, client: httpx.Client
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    endpoint = create_endpoint(client, receiver.url)
    spawn.worker(once=False, **FAST_WEBHOOKS)
    assert post_payment(client, key=new_key()).status_code == 201
    wait_settled(client, endpoint)
    event_id = client.get("/events").json()["data"][0]["id"]

    queued = client.post(f"/events/{event_id}/redeliver")
    assert queued.status_code == 202
    assert queued.json() == {"event_id": event_id, "deliveries_queued": 1}
    wait_until(lambda: len(receiver.answered()) == 2, message="the redelivery")
    _assert_same_event_again(receiver, endpoint["secret"])


def test_a_delivery_past_its_retry_window_is_failed_and_shown(
    spawn: Spawner, tmp_path: Path, client: httpx.Client
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    receiver.mode("fail")
    endpoint = create_endpoint(client, receiver.url)
    spawn.worker(once=False, **FAST_WEBHOOKS, PAYMENTS_WEBHOOK_MAX_AGE_S="1")
    assert post_payment(client, key=new_key()).status_code == 201

    wait_settled(client, endpoint)
    [delivery] = deliveries(client, endpoint)
    assert delivery["status"] == "failed"
    assert delivery["next_attempt_at"] is None
    assert delivery["attempt_count"] == len(receiver.records()) >= 1
    assert all(a["status_code"] == 500 for a in delivery["attempts"])


def test_worker_once_delivers_what_is_due(
    spawn: Spawner, tmp_path: Path, client: httpx.Client
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    endpoint = create_endpoint(client, receiver.url)
    assert post_payment(client, key=new_key()).status_code == 201

    worker = spawn.worker(once=True, **FAST_WEBHOOKS)
    assert worker.wait_exit(timeout=60) == 0, worker.log()[-3000:]
    assert len(receiver.answered()) == 1
    [delivery] = deliveries(client, endpoint)
    assert delivery["status"] == "succeeded"


def test_sigterm_lets_the_attempt_under_way_finish_and_be_recorded(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, db: Db
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    receiver.mode("hang")
    endpoint = create_endpoint(client, receiver.url)
    worker = spawn.worker(once=False, **FAST_WEBHOOKS)
    assert post_payment(client, key=new_key()).status_code == 201
    wait_until(lambda: len(receiver.records()) == 1, message="the attempt to arrive")

    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(timeout=30) == 0, worker.log()[-3000:]
    [delivery] = deliveries(client, endpoint)
    # The attempt ran into its timeout and was recorded; nothing is left leased.
    assert delivery["status"] == "pending"
    assert [a["error"] for a in delivery["attempts"]] == ["timed out after 2s"]
    leased = db.execute(
        "SELECT lease_owner FROM webhook_deliveries d JOIN events e ON e.id = d.event_id "
        "WHERE d.endpoint_id = %s",
        (uuid.UUID(hex=endpoint["id"].removeprefix("we_")),),
    ).fetchone()
    assert leased == {"lease_owner": None}
    receiver.release()
    assert client.delete(f"/webhook-endpoints/{endpoint['id']}").status_code == 204


def test_an_address_no_longer_allowed_is_refused_at_delivery(
    spawn: Spawner, tmp_path: Path, client: httpx.Client
) -> None:
    """The URL was accepted in development; a worker that does not allow local receivers
    checks it again and does not connect."""
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    # `localhost` is refused by its name before anything is resolved. A name that only
    # resolves to a non-public address at delivery: test_delivery_addresses.py.
    endpoint = create_endpoint(client, f"http://localhost:{receiver.port}/hook")
    assert post_payment(client, key=new_key()).status_code == 201
    worker = spawn.worker(once=True, **FAST_WEBHOOKS, PAYMENTS_WEBHOOKS_ALLOW_LOCAL="0")
    assert worker.wait_exit(timeout=60) == 0, worker.log()[-3000:]

    [delivery] = deliveries(client, endpoint)
    assert delivery["attempts"]
    assert all(a["error"].startswith("refused: ") for a in delivery["attempts"])
    assert receiver.records() == []
    assert client.delete(f"/webhook-endpoints/{endpoint['id']}").status_code == 204
