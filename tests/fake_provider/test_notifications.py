"""Notifications: one signed event per record the provider makes, sent to the merchant's
endpoint, retried until answered 2xx, in the order of its charge; none without an endpoint."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_provider.merchants import DEFAULT_KEYS
from tests.fake_provider.event_receiver import (
    SECRET,
    EventReceiver,
    receiving,
    signed_correctly,
)
from tests.fake_provider.notification_calls import (
    endpoint,
    events,
    notifying,
    of_charge,
    set_endpoint,
    settled,
)
from tests.fake_provider.provider import (
    Provider,
    authorize,
    charge_body,
    new_account,
    new_key,
    post_capture,
    post_charge,
    post_void,
    start_provider,
)

EVENT_ID = re.compile(r"evt_[0-9a-f]{32}")


@pytest.fixture
def receiver(client: httpx.Client) -> Iterator[EventReceiver]:
    """A receiver the development merchant's events go to during the test."""
    with receiving() as running, notifying(client, running):
        yield running


def post_refund(client: httpx.Client, key: str, charge_id: str, amount: int) -> httpx.Response:
    return client.post(
        "/refunds",
        json={"charge_id": charge_id, "amount_minor": amount},
        headers={"Idempotency-Key": key},
    )


def new_charge(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = post_charge(client, new_key(), charge_body(account_id=new_account(), **body))
    assert response.status_code == 201, response.text
    charge: dict[str, Any] = response.json()
    return charge


@dataclass(frozen=True)
class Made:
    """A record a case made: its charge, its body as answered, and the path of its lookup."""

    charge_id: str
    body: dict[str, Any]
    lookup: str
    # The events its charge made before it (the charge's own, for a refund, capture, void).
    before: int


def _succeeded(client: httpx.Client) -> Made:
    charge = new_charge(client)
    return Made(charge["charge_id"], charge, "/charges", 0)


def _declined(client: httpx.Client) -> Made:
    body = charge_body(account_id="acc_decline_insufficient_funds")
    charge = post_charge(client, new_key(), body).json()
    assert charge["status"] == "declined"
    return Made(charge["charge_id"], charge, "/charges", 0)


def _authorized(client: httpx.Client) -> Made:
    charge = authorize(client)
    return Made(charge["charge_id"], charge, "/charges", 0)


def _refund(client: httpx.Client) -> Made:
    charge = new_charge(client)
    refund = post_refund(client, new_key(), charge["charge_id"], 400)
    assert refund.status_code == 201, refund.text
    return Made(charge["charge_id"], refund.json(), "/refunds", 1)


def _capture(client: httpx.Client) -> Made:
    charge = authorize(client)
    capture = post_capture(client, new_key(), charge["charge_id"], 600)
    assert capture.status_code == 201, capture.text
    return Made(charge["charge_id"], capture.json(), "/captures", 1)


def _void(client: httpx.Client) -> Made:
    charge = authorize(client)
    void = post_void(client, new_key(), charge["charge_id"])
    assert void.status_code == 201, void.text
    return Made(charge["charge_id"], void.json(), "/voids", 1)


CASES: dict[str, tuple[Callable[[httpx.Client], Made], str]] = {
    "charge-succeeded": (_succeeded, "charge.succeeded"),
    "charge-declined": (_declined, "charge.declined"),
    "charge-authorized": (_authorized, "charge.authorized"),
    "refund": (_refund, "refund.succeeded"),
    "capture": (_capture, "capture.succeeded"),
    "void": (_void, "void.succeeded"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_each_record_makes_one_signed_event(
    client: httpx.Client, receiver: EventReceiver, case: str
) -> None:
    make, event_type = CASES[case]
    started = int(time.time())

    made = make(client)
    arrivals = of_charge(receiver.wait_for(made.before + 1), made.charge_id)
    lookup = client.get(made.lookup, params={"idempotency_key": made.body["idempotency_key"]})

    assert len(arrivals) == made.before + 1
    arrival = arrivals[-1]
    assert signed_correctly(arrival, SECRET)
    assert not signed_correctly(arrival, "whsec_c29tZS1vdGhlci1zZWNyZXQ=")
    assert arrival.headers["content-type"] == "application/json"
    event = arrival.event
    assert set(event) == {"id", "type", "created", "data"}
    assert EVENT_ID.fullmatch(event["id"])
    assert event["type"] == event_type
    assert started <= event["created"] <= time.time()
    # The record exactly as its call answered it, and as its lookup answers it.
    assert event["data"] == {"object": made.body}
    assert lookup.json() == made.body
    [listed] = [e for e in settled(client, made.charge_id) if e["id"] == event["id"]]
    assert listed["type"] == event_type
    assert listed["idempotency_key"] == made.body["idempotency_key"]
    assert listed["body"] == arrival.body.decode()
    [delivery] = listed["deliveries"]
    assert delivery["state"] == "delivered"
    assert [a["status"] for a in delivery["attempts"]] == [200]


def test_a_replay_or_a_refused_call_makes_no_event(
    client: httpx.Client, receiver: EventReceiver
) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    charge = post_charge(client, key, body).json()
    charge_id = charge["charge_id"]
    replay = post_charge(client, key, body)
    reused = post_charge(client, key, {**body, "amount_minor": 999})
    refund_key = new_key()
    refund = post_refund(client, refund_key, charge_id, 100)
    refund_replay = post_refund(client, refund_key, charge_id, 100)
    too_much = post_refund(client, new_key(), charge_id, 10_000)

    assert replay.headers["Idempotent-Replayed"] == "true"
    assert refund_replay.headers["Idempotent-Replayed"] == "true"
    assert (reused.status_code, too_much.status_code) == (409, 400)
    # The events are stored with their records, before the answers: the listing is whole.
    assert [e["type"] for e in events(client, charge_id=charge_id)] == [
        "charge.succeeded",
        "refund.succeeded",
    ]
    # A charge's events arrive in order: once the refund's is in, nothing else came before.
    wait = receiver.wait_for(2)
    assert [a.event["type"] for a in of_charge(wait, charge_id)] == [
        "charge.succeeded",
        "refund.succeeded",
    ]
    assert (
        refund.json()["refund_id"]
        == of_charge(wait, charge_id)[1].event["data"]["object"]["refund_id"]
    )


def test_without_an_endpoint_no_event_is_made(client: httpx.Client) -> None:
    assert client.delete("/_notifications").status_code == 204

    charge = new_charge(client)

    assert endpoint(client)["url"] is None
    assert events(client, charge_id=charge["charge_id"]) == []


def test_a_failed_attempt_is_retried_with_backoff_and_holds_back_its_charge(
    client: httpx.Client, receiver: EventReceiver
) -> None:
    receiver.answer(500, 500)

    charge = new_charge(client)
    refund = post_refund(client, new_key(), charge["charge_id"], 100)
    arrivals = receiver.wait_for(4)

    assert refund.status_code == 201
    assert [(a.event["type"], a.status) for a in arrivals] == [
        ("charge.succeeded", 500),
        ("charge.succeeded", 500),
        ("charge.succeeded", 200),
        ("refund.succeeded", 200),
    ]
    # The same event each time, signed anew.
    assert len({a.body for a in arrivals[:3]}) == 1
    assert all(signed_correctly(a) for a in arrivals)
    # Backoff: 1 s after the first failure, 2 s after the second.
    assert arrivals[1].at - arrivals[0].at >= 0.9
    assert arrivals[2].at - arrivals[1].at >= 1.9
    [charged, refunded] = settled(client, charge["charge_id"])
    [delivery] = charged["deliveries"]
    assert [a["status"] for a in delivery["attempts"]] == [500, 500, 200]
    assert delivery["state"] == "delivered"
    assert refunded["deliveries"][0]["state"] == "delivered"


def test_the_endpoint_is_shown_without_its_secret_and_counts_its_events(
    client: httpx.Client,
) -> None:
    with receiving() as receiver:
        shown = set_endpoint(client, receiver.url)
        before = endpoint(client)
        try:
            settled(client, new_charge(client)["charge_id"])
            after = endpoint(client)
            listing = client.get("/_notifications/events").text
        finally:
            assert client.delete("/_notifications").status_code == 204
        removed = endpoint(client)

    assert shown == {**before, "url": receiver.url}
    assert set(before) == {"merchant", "url", "sent", "delivered", "pending", "failed", "dropped"}
    assert before["merchant"] == "dev"
    assert SECRET not in str(shown) + str(after) + listing
    assert after["sent"] == before["sent"] + 1
    assert after["delivered"] == before["delivered"] + 1
    assert removed["url"] is None


ACME_KEY = "sk_test_acme_notifications_0001"


def test_each_merchants_events_go_to_its_own_endpoint(tmp_path: Path) -> None:
    keys = f"{DEFAULT_KEYS},acme:{ACME_KEY}"
    provider = start_provider(
        tmp_path / "ledger.sqlite3", tmp_path / "logs", env={"PAYMENTS_FAKE_PROVIDER_KEYS": keys}
    )
    try:
        with (
            receiving() as acme,
            receiving() as dev,
            provider.client() as client,
            provider.client(headers={"Authorization": f"Bearer {ACME_KEY}"}) as acme_client,
        ):
            set_endpoint(client, dev.url)
            acme_set = client.put(
                "/_notifications", json={"url": acme.url, "secret": SECRET, "merchant": "acme"}
            )
            acme_charge = new_charge(acme_client)
            post_refund(acme_client, new_key(), acme_charge["charge_id"], 100)
            dev_charge = new_charge(client)
            acme_arrivals = acme.wait_for(2)
            [dev_arrival] = dev.wait_for(1)
            listed = events(client)
            shown = client.get("/_notifications", params={"merchant": "acme"}).json()
    finally:
        provider.process.stop()

    assert acme_set.status_code == 200, acme_set.text
    assert shown["url"] == acme.url
    assert [a.event["type"] for a in acme_arrivals] == ["charge.succeeded", "refund.succeeded"]
    assert acme_arrivals[0].event["data"]["object"] == acme_charge
    assert dev_arrival.event["data"]["object"] == dev_charge
    assert [(e["merchant"], e["url"]) for e in listed] == [
        ("acme", acme.url),
        ("acme", acme.url),
        ("dev", dev.url),
    ]


def test_the_admin_api_takes_no_merchant_key(provider: Provider) -> None:
    with provider.client(headers={}) as anonymous:
        assert anonymous.get("/_notifications").status_code == 200
        assert anonymous.get("/_notifications/events").status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"url": "ftp://127.0.0.1/events", "secret": SECRET},
        {"url": "127.0.0.1:9/events", "secret": SECRET},
        {"url": "http://127.0.0.1/ events", "secret": SECRET},
        {"url": "http://127.0.0.1/events", "secret": "sk_test_payments_development"},
        {"url": "http://127.0.0.1/events", "secret": "whsec_short"},
        {"url": "http://127.0.0.1/events"},
        {"url": "http://127.0.0.1/events", "secret": SECRET, "merchant": "acme"},
        {"url": "http://127.0.0.1/events", "secret": SECRET, "merchant": "Not A Merchant"},
        {"url": "http://127.0.0.1/events", "secret": SECRET, "extra": True},
    ],
    ids=[
        "not-http",
        "no-scheme",
        "white-space",
        "not-whsec",
        "short-secret",
        "no-secret",
        "unknown-merchant",
        "bad-merchant",
        "unknown-member",
    ],
)
def test_a_bad_endpoint_is_400_and_not_set(client: httpx.Client, body: dict[str, Any]) -> None:
    assert client.delete("/_notifications").status_code == 204

    response = client.put("/_notifications", json=body)

    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_request"
    assert endpoint(client)["url"] is None
