"""Notification faults (`POST /_faults`): duplicated, delayed, dropped, reordered, early and
made-up events, each drawn when an event is made."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import httpx
import pytest

from tests.fake_provider.event_receiver import EventReceiver, receiving, signed_correctly
from tests.fake_provider.notification_calls import events, notifying, of_charge, settled
from tests.fake_provider.provider import (
    Provider,
    add_fault,
    authorize,
    charge_body,
    fault_rules,
    new_account,
    new_key,
    post_capture,
    post_charge,
)


@pytest.fixture
def receiver(client: httpx.Client) -> Iterator[EventReceiver]:
    """A receiver the development merchant's events go to during the test."""
    with receiving() as running, notifying(client, running):
        yield running


def charge_on(client: httpx.Client, account: str) -> dict[str, Any]:
    response = post_charge(client, new_key(), charge_body(account_id=account))
    assert response.status_code == 201, response.text
    charge: dict[str, Any] = response.json()
    return charge


def refund(client: httpx.Client, charge_id: str) -> dict[str, Any]:
    response = client.post(
        "/refunds",
        json={"charge_id": charge_id, "amount_minor": 100},
        headers={"Idempotency-Key": new_key()},
    )
    assert response.status_code == 201, response.text
    refunded: dict[str, Any] = response.json()
    return refunded


@pytest.mark.parametrize("copies", [None, 3], ids=["default-copies", "three-copies"])
def test_duplicate_sends_the_same_event_several_times(
    client: httpx.Client, receiver: EventReceiver, copies: int | None
) -> None:
    account = new_account()
    rule = add_fault(
        client,
        fault="notify_duplicate",
        account_id=account,
        **({} if copies is None else {"copies": copies}),
    )

    charge = charge_on(client, account)
    expected = copies or 2
    arrivals = of_charge(receiver.wait_for(expected), charge["charge_id"])

    assert rule["copies"] == expected
    assert len(arrivals) == expected
    assert len({a.event["id"] for a in arrivals}) == 1
    assert len({a.body for a in arrivals}) == 1
    assert all(signed_correctly(a) for a in arrivals)
    [event] = settled(client, charge["charge_id"])
    assert event["fault"] == "notify_duplicate"
    assert [(d["copy"], d["state"]) for d in event["deliveries"]] == [
        (n, "delivered") for n in range(1, expected + 1)
    ]


def test_drop_never_sends_the_event(client: httpx.Client, receiver: EventReceiver) -> None:
    account = new_account()
    add_fault(client, fault="notify_drop", account_id=account, call="charge")

    charge = charge_on(client, account)
    refunded = refund(client, charge["charge_id"])
    # The refund's event comes after the charge's in the charge's order: the charge's was
    # not merely late, it was never sent.
    arrivals = of_charge(receiver.wait_for(1), charge["charge_id"])

    assert [a.event["data"]["object"] for a in arrivals] == [refunded]
    dropped, sent = settled(client, charge["charge_id"])
    assert (dropped["type"], dropped["fault"]) == ("charge.succeeded", "notify_drop")
    assert [(d["state"], d["attempts"]) for d in dropped["deliveries"]] == [("dropped", [])]
    assert sent["deliveries"][0]["state"] == "delivered"


def test_reorder_sends_the_event_after_the_next_one_of_its_charge(
    client: httpx.Client, receiver: EventReceiver
) -> None:
    account = new_account()
    add_fault(client, fault="notify_reorder", account_id=account)

    charge = authorize(client, account_id=account)
    held = events(client, charge_id=charge["charge_id"])
    capture = post_capture(client, new_key(), charge["charge_id"], 300).json()
    arrivals = of_charge(receiver.wait_for(2), charge["charge_id"])

    assert [d["state"] for d in held[0]["deliveries"]] == ["held"]
    assert [a.event["type"] for a in arrivals] == ["capture.succeeded", "charge.authorized"]
    assert [a.event["data"]["object"] for a in arrivals] == [capture, charge]
    assert [e["type"] for e in events(client, charge_id=charge["charge_id"])] == [
        "charge.authorized",
        "capture.succeeded",
    ]


def test_delay_holds_the_event_and_what_follows_it(
    client: httpx.Client, receiver: EventReceiver
) -> None:
    account = new_account()
    rule = add_fault(client, fault="notify_delay", account_id=account, delay_s=1.5)
    started = time.time()

    charge = charge_on(client, account)
    answered = time.time()
    refund(client, charge["charge_id"])
    arrivals = of_charge(receiver.wait_for(2), charge["charge_id"])

    assert rule["delay_s"] == 1.5
    assert answered - started < 1.5
    assert [a.event["type"] for a in arrivals] == ["charge.succeeded", "refund.succeeded"]
    assert arrivals[0].at - started >= 1.5


def test_early_sends_the_event_before_the_call_answers(
    provider: Provider, client: httpx.Client, receiver: EventReceiver
) -> None:
    account = new_account()
    add_fault(client, fault="notify_early", account_id=account)
    receiver.hold_next()

    with ThreadPoolExecutor(max_workers=1) as pool, provider.client() as caller:
        call = pool.submit(post_charge, caller, new_key(), charge_body(account_id=account))
        [arrival] = receiver.wait_for(1)
        # The receiver has the event and has not answered it: the charge's answer must not
        # come meanwhile. (A negative can only be waited for a while: two seconds here.)
        with pytest.raises(FutureTimeout):
            call.result(timeout=2)
        receiver.release()
        response = call.result(timeout=30)

    assert response.status_code == 201
    assert arrival.event["data"]["object"] == response.json()
    assert signed_correctly(arrival)
    [event] = events(client, charge_id=response.json()["charge_id"])
    [delivery] = event["deliveries"]
    assert [(a["status"], a["early"]) for a in delivery["attempts"]] == [(200, True)]


def test_unknown_key_also_sends_an_event_for_a_key_never_sent(
    client: httpx.Client, receiver: EventReceiver
) -> None:
    account = new_account()
    add_fault(client, fault="notify_unknown_key", account_id=account)

    charge = charge_on(client, account)
    arrivals = receiver.wait_for(2)

    [real] = of_charge(arrivals, charge["charge_id"])
    [made_up] = [a for a in arrivals if a is not real]
    assert real.event["data"]["object"] == charge
    assert signed_correctly(made_up)
    assert made_up.event["type"] == "charge.succeeded"
    assert made_up.event["id"] != real.event["id"]
    invented = made_up.event["data"]["object"]
    assert invented["idempotency_key"].startswith("payment-")
    assert invented["idempotency_key"] != charge["idempotency_key"]
    assert invented["charge_id"] != charge["charge_id"]
    assert (invented["amount_minor"], invented["account_id"]) == (1250, account)
    # The provider holds no charge under that key: nobody asked for it.
    lookup = client.get("/charges", params={"idempotency_key": invented["idempotency_key"]})
    assert lookup.status_code == 404
    listed = {e["id"]: e for e in events(client)}
    assert listed[real.event["id"]]["fault"] == "notify_unknown_key"
    assert listed[made_up.event["id"]]["made_up"] is True


def test_a_rule_is_used_only_by_an_event_made(client: httpx.Client) -> None:
    account = new_account()
    key, body = new_key(), charge_body(account_id=account)
    add_fault(client, fault="notify_drop", account_id=account)

    # No endpoint: no event, and the rule stays.
    assert client.delete("/_notifications").status_code == 204
    post_charge(client, key, body)
    unused = fault_rules(client)
    with receiving() as receiver, notifying(client, receiver):
        # A replay makes no event either.
        post_charge(client, key, body)
        still = fault_rules(client)
        charge = charge_on(client, account)
        used = fault_rules(client)
        [event] = events(client, charge_id=charge["charge_id"])

    assert [r["remaining"] for r in unused] == [r["remaining"] for r in still] == [1]
    assert used == []
    assert event["deliveries"][0]["state"] == "dropped"


def test_call_limits_a_rule_to_the_events_of_one_kind_of_record(
    client: httpx.Client, receiver: EventReceiver
) -> None:
    account = new_account()
    add_fault(client, fault="notify_drop", account_id=account, call="refund")

    charge = charge_on(client, account)
    refund(client, charge["charge_id"])
    second = refund(client, charge["charge_id"])
    arrivals = of_charge(receiver.wait_for(2), charge["charge_id"])

    assert [a.event["type"] for a in arrivals] == ["charge.succeeded", "refund.succeeded"]
    assert arrivals[1].event["data"]["object"] == second


@pytest.mark.parametrize(
    "rule",
    [
        {"fault": "notify_delay", "delay_s": 2, "call": "notification"},
        {"fault": "notify_duplicate", "copies": 10, "call": "capture"},
        {"fault": "notify_early", "times": 3, "idempotency_key": "k-1"},
    ],
    ids=["delay-notification", "duplicate-capture", "early-key"],
)
def test_a_notification_rule_is_echoed(client: httpx.Client, rule: dict[str, Any]) -> None:
    created = add_fault(client, **rule)

    assert {name: created[name] for name in rule} == rule
    assert fault_rules(client) == [created]


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ({"fault": "notify_drop", "copies": 2}, "copies applies only to notify_duplicate"),
        ({"fault": "notify_duplicate", "copies": 1}, "copies: Input should be greater than"),
        ({"fault": "notify_duplicate", "copies": 11}, "copies: Input should be less than"),
        ({"fault": "notify_duplicate", "copies": "2"}, "copies: Input should be a valid integer"),
        ({"fault": "notify_drop", "delay_s": 1}, "delay_s applies only to"),
        ({"fault": "notify_reorder", "decline_code": "x"}, "decline_code applies only to"),
        ({"fault": "latency", "call": "notification"}, "call notification applies only to"),
        ({"fault": "decline", "call": "notification"}, "decline applies only to charges"),
        ({"fault": "notify_sideways"}, "'notify_unknown_key'"),
    ],
    ids=[
        "copies-on-drop",
        "one-copy",
        "eleven-copies",
        "copies-as-string",
        "delay-on-drop",
        "decline-code-on-reorder",
        "notification-on-latency",
        "notification-on-decline",
        "unknown-fault",
    ],
)
def test_a_bad_notification_rule_is_400_and_not_armed(
    client: httpx.Client, rule: dict[str, Any], problem: str
) -> None:
    response = client.post("/_faults", json=rule)

    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_request"
    assert problem in response.json()["detail"]
    assert fault_rules(client) == []
