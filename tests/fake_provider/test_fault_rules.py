"""The admin API: rules are created, listed, cleared, matched by filter and used up exactly."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fake_provider.provider import (
    add_fault,
    all_at_once,
    charge_body,
    fault_rules,
    ledger,
    new_account,
    new_key,
    post_charge,
)


def test_created_rule_is_echoed_and_listed_with_its_defaults(client: httpx.Client) -> None:
    account = new_account()

    created = add_fault(client, fault="timeout_after_commit", account_id=account)

    assert created == {
        "id": created["id"],
        "fault": "timeout_after_commit",
        "times": 1,
        "remaining": 1,
        "account_id": account,
        "idempotency_key": None,
        "delay_s": 30.0,
        "decline_code": None,
        "call": None,
    }
    assert fault_rules(client) == [created]


def test_delete_clears_every_rule(client: httpx.Client) -> None:
    add_fault(client, fault="unavailable", times=3)
    add_fault(client, fault="lookup_unavailable")

    assert client.delete("/_faults").status_code == 204

    assert fault_rules(client) == []
    assert post_charge(client, new_key(), charge_body()).status_code == 201


@pytest.mark.parametrize(
    "rule",
    [
        {"fault": "meteor_strike"},
        {"fault": "unavailable", "times": 0},
        {"fault": "unavailable", "times": "2"},
        {"fault": "latency", "delay_s": -1},
        {"fault": "latency", "delay_s": "1"},
        {"fault": "unavailable", "delay_s": 1},
        {"fault": "unavailable", "account_id": ""},
        {"fault": "unavailable", "idempotency_key": "has space"},
        {"fault": "unavailable", "extra": True},
        {"times": 1},
    ],
)
def test_bad_rule_is_400_and_not_armed(client: httpx.Client, rule: dict[str, Any]) -> None:
    response = client.post("/_faults", json=rule)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert fault_rules(client) == []


def test_times_two_affects_exactly_the_next_two_calls(client: httpx.Client) -> None:
    add_fault(client, fault="unavailable", times=2)
    account = new_account()

    first = post_charge(client, new_key(), charge_body(account_id=account))
    [rule] = fault_rules(client)
    second = post_charge(client, new_key(), charge_body(account_id=account))
    third = post_charge(client, new_key(), charge_body(account_id=account))

    assert rule["remaining"] == 1
    assert [first.status_code, second.status_code, third.status_code] == [503, 503, 201]
    assert fault_rules(client) == []


@pytest.mark.parametrize(("times", "calls"), [(1, 50), (2, 30)])
def test_times_is_exact_under_concurrent_calls(
    client: httpx.Client, times: int, calls: int
) -> None:
    account = new_account()
    keys = [new_key() for _ in range(calls)]
    add_fault(client, fault="unavailable", times=times, account_id=account)

    def call(index: int) -> int:
        return post_charge(client, keys[index], charge_body(account_id=account)).status_code

    statuses = all_at_once(calls, call)

    assert sorted(statuses) == [201] * (calls - times) + [503] * times
    committed = {charge["idempotency_key"] for charge in ledger(client)} & set(keys)
    assert len(committed) == calls - times
    assert fault_rules(client) == []


def test_account_filter_only_matches_that_account(client: httpx.Client) -> None:
    target, other = new_account(), new_account()
    add_fault(client, fault="unavailable", account_id=target)

    spared = post_charge(client, new_key(), charge_body(account_id=other))
    [rule] = fault_rules(client)
    hit = post_charge(client, new_key(), charge_body(account_id=target))

    assert spared.status_code == 201
    assert rule["remaining"] == 1
    assert hit.status_code == 503


def test_key_filter_only_matches_that_key(client: httpx.Client) -> None:
    target, other = new_key(), new_key()
    add_fault(client, fault="error_after_commit", idempotency_key=target)

    spared = post_charge(client, other, charge_body(account_id=new_account()))
    hit = post_charge(client, target, charge_body(account_id=new_account()))

    assert spared.status_code == 201
    assert hit.status_code == 500
    assert fault_rules(client) == []


def test_lookup_account_filter_matches_the_account_of_the_stored_charge(
    client: httpx.Client,
) -> None:
    target, other = new_account(), new_account()
    target_key, other_key, unknown_key = new_key(), new_key(), new_key()
    post_charge(client, target_key, charge_body(account_id=target))
    post_charge(client, other_key, charge_body(account_id=other))
    add_fault(client, fault="lookup_unavailable", account_id=target)

    def lookup(key: str) -> int:
        return client.get("/charges", params={"idempotency_key": key}).status_code

    assert lookup(other_key) == 200
    assert lookup(unknown_key) == 404
    assert lookup(target_key) == 503
    assert lookup(target_key) == 200


def test_lookup_key_filter_matches_a_key_with_no_charge(client: httpx.Client) -> None:
    key = new_key()
    add_fault(client, fault="lookup_unavailable", idempotency_key=key)

    assert client.get("/charges", params={"idempotency_key": new_key()}).status_code == 404
    assert client.get("/charges", params={"idempotency_key": key}).status_code == 503
    assert client.get("/charges", params={"idempotency_key": key}).status_code == 404


def test_rules_match_in_creation_order(client: httpx.Client) -> None:
    account = new_account()
    add_fault(client, fault="unavailable", account_id=account)
    add_fault(client, fault="error_after_commit", account_id=account)

    statuses = [
        post_charge(client, new_key(), charge_body(account_id=account)).status_code
        for _ in range(3)
    ]

    assert statuses == [503, 500, 201]


def test_charge_faults_ignore_lookups_and_lookup_faults_ignore_charges(
    client: httpx.Client,
) -> None:
    key = new_key()
    add_fault(client, fault="unavailable")
    add_fault(client, fault="lookup_unavailable")

    lookup = client.get("/charges", params={"idempotency_key": key})
    [charge_rule] = fault_rules(client)

    assert lookup.status_code == 503
    assert charge_rule["fault"] == "unavailable"
    assert charge_rule["remaining"] == 1
    assert post_charge(client, key, charge_body()).status_code == 503
    assert fault_rules(client) == []


def test_invalid_charge_requests_do_not_use_up_a_rule(client: httpx.Client) -> None:
    add_fault(client, fault="unavailable")

    invalid = post_charge(client, new_key(), {**charge_body(), "amount_minor": 0})

    assert invalid.status_code == 400
    assert [rule["remaining"] for rule in fault_rules(client)] == [1]
