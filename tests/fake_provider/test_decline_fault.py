"""The `decline` fault: the next new charges it matches are stored and answered as declines."""

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
    ledger_for,
    new_account,
    new_key,
    post_charge,
)


def lookup(client: httpx.Client, key: str) -> httpx.Response:
    """`GET /charges?idempotency_key=key`."""
    return client.get("/charges", params={"idempotency_key": key})


def remaining(client: httpx.Client) -> list[int]:
    """The calls each rule still has, in matching order."""
    return [rule["remaining"] for rule in fault_rules(client)]


def test_decline_answers_a_definite_decline_with_the_rules_code(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="decline", decline_code="try_another_provider")

    response = post_charge(client, key, body)

    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response.headers
    charge = response.json()
    assert charge["status"] == "declined"
    assert charge["decline_code"] == "try_another_provider"
    assert {name: charge[name] for name in body} == body
    assert ledger_for(client, key) == [charge]
    assert fault_rules(client) == []


def test_decline_without_a_code_declines_with_processor_declined(client: httpx.Client) -> None:
    account = new_account()

    created = add_fault(client, fault="decline", account_id=account)
    response = post_charge(client, new_key(), charge_body(account_id=account))

    assert created == {
        "id": created["id"],
        "fault": "decline",
        "times": 1,
        "remaining": 1,
        "account_id": account,
        "idempotency_key": None,
        "delay_s": None,
        "decline_code": "processor_declined",
        "call": None,
    }
    assert response.status_code == 201
    assert response.json()["status"] == "declined"
    assert response.json()["decline_code"] == "processor_declined"


def test_the_decline_is_replayed_under_its_key_and_found_by_lookup(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="decline", decline_code="do_not_honor")

    declined = post_charge(client, key, body).json()
    replay = post_charge(client, key, body)
    found = lookup(client, key)

    assert declined["status"] == "declined"
    assert replay.status_code == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == declined
    assert found.status_code == 200
    assert found.json() == declined
    # The rule was used up by the first call alone; the decline stays one under its key.
    assert post_charge(client, new_key(), body).json()["status"] == "succeeded"
    assert ledger_for(client, key) == [declined]


def test_a_key_that_holds_a_charge_uses_up_no_decline(client: httpx.Client) -> None:
    account = new_account()
    key, body = new_key(), charge_body(account_id=account)
    succeeded = post_charge(client, key, body).json()
    add_fault(client, fault="decline", account_id=account)

    replay = post_charge(client, key, body)
    reused = post_charge(client, key, {**body, "amount_minor": body["amount_minor"] + 1})
    left_after_both = remaining(client)
    fresh = post_charge(client, new_key(), body)

    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == succeeded
    assert reused.status_code == 409
    assert left_after_both == [1]
    assert fresh.json()["status"] == "declined"
    assert fault_rules(client) == []


def test_times_declines_exactly_the_next_new_charges(client: httpx.Client) -> None:
    account = new_account()
    add_fault(client, fault="decline", times=2, account_id=account)

    first = post_charge(client, new_key(), charge_body(account_id=account)).json()
    left_after_first = remaining(client)
    second = post_charge(client, new_key(), charge_body(account_id=account)).json()
    third = post_charge(client, new_key(), charge_body(account_id=account)).json()

    assert left_after_first == [1]
    assert [first["status"], second["status"], third["status"]] == [
        "declined",
        "declined",
        "succeeded",
    ]
    assert third["decline_code"] is None
    assert fault_rules(client) == []


def test_times_is_exact_under_concurrent_new_charges(client: httpx.Client) -> None:
    account = new_account()
    keys = [new_key() for _ in range(30)]
    add_fault(client, fault="decline", times=7, account_id=account)

    def call(index: int) -> str:
        charged: dict[str, Any] = post_charge(
            client, keys[index], charge_body(account_id=account)
        ).json()
        return str(charged["status"])

    statuses = all_at_once(len(keys), call)

    assert sorted(statuses) == ["declined"] * 7 + ["succeeded"] * 23
    stored = [charge for charge in ledger(client) if charge["idempotency_key"] in set(keys)]
    assert sorted(charge["status"] for charge in stored) == sorted(statuses)
    assert fault_rules(client) == []


def test_concurrent_identical_requests_make_one_decline_and_use_one_call(
    client: httpx.Client,
) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="decline", times=2)

    answers = all_at_once(20, lambda _: post_charge(client, key, body))

    [declined] = ledger_for(client, key)
    assert declined["status"] == "declined"
    assert {response.status_code for response in answers} == {201}
    assert all(response.json() == declined for response in answers)
    assert sum("Idempotent-Replayed" not in response.headers for response in answers) == 1
    assert remaining(client) == [1]


def test_account_filter_declines_only_that_account(client: httpx.Client) -> None:
    target, other = new_account(), new_account()
    add_fault(client, fault="decline", account_id=target)

    spared = post_charge(client, new_key(), charge_body(account_id=other))
    left = remaining(client)
    hit = post_charge(client, new_key(), charge_body(account_id=target))

    assert spared.json()["status"] == "succeeded"
    assert left == [1]
    assert hit.json()["status"] == "declined"
    assert fault_rules(client) == []


def test_key_filter_declines_only_that_key(client: httpx.Client) -> None:
    target, other = new_key(), new_key()
    add_fault(client, fault="decline", idempotency_key=target)

    spared = post_charge(client, other, charge_body(account_id=new_account()))
    hit = post_charge(client, target, charge_body(account_id=new_account()))

    assert spared.json()["status"] == "succeeded"
    assert hit.json()["status"] == "declined"
    assert fault_rules(client) == []


@pytest.mark.parametrize("account_id", ["acc_decline_insufficient_funds", "acc_reject"])
def test_the_rule_decides_whatever_the_account_would(client: httpx.Client, account_id: str) -> None:
    key, body = new_key(), charge_body(account_id=account_id)
    add_fault(client, fault="decline", decline_code="rerouted")

    response = post_charge(client, key, body)

    assert response.status_code == 201
    assert response.json()["decline_code"] == "rerouted"
    assert ledger_for(client, key) == [response.json()]


def test_a_decline_whose_answer_is_lost_is_found_by_lookup(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="drop_after_commit")
    add_fault(client, fault="decline", decline_code="issuer_unavailable")

    with pytest.raises(httpx.RemoteProtocolError):
        post_charge(client, key, body)

    found = lookup(client, key)
    assert found.json()["status"] == "declined"
    assert found.json()["decline_code"] == "issuer_unavailable"
    assert fault_rules(client) == []


def test_a_call_refused_before_processing_uses_up_no_decline(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="unavailable")
    add_fault(client, fault="decline")

    refused = post_charge(client, key, body)
    left = [(rule["fault"], rule["remaining"]) for rule in fault_rules(client)]
    retried = post_charge(client, key, body)

    assert refused.status_code == 503
    assert left == [("decline", 1)]
    assert retried.json()["status"] == "declined"


def test_refunds_and_lookups_use_up_no_decline(client: httpx.Client) -> None:
    key = new_key()
    charged = post_charge(client, key, charge_body(account_id=new_account())).json()
    add_fault(client, fault="decline")

    refund = client.post(
        "/refunds",
        json={"charge_id": charged["charge_id"], "amount_minor": 100},
        headers={"Idempotency-Key": new_key()},
    )
    found = lookup(client, key)

    assert refund.status_code == 201
    assert found.json() == charged
    assert remaining(client) == [1]


def test_a_code_of_64_characters_is_taken(client: httpx.Client) -> None:
    code = "a" * 64

    created = add_fault(client, fault="decline", decline_code=code)

    assert created["decline_code"] == code
    assert post_charge(client, new_key(), charge_body()).json()["decline_code"] == code


@pytest.mark.parametrize(
    "code", ["", "a" * 65, "Card_Declined", "card-declined", "card declined", "ç", 12, True]
)
def test_bad_decline_code_is_400_and_not_armed(client: httpx.Client, code: object) -> None:
    response = client.post("/_faults", json={"fault": "decline", "decline_code": code})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    # The code alone is refused: `decline` itself is a fault the provider knows.
    assert response.json()["detail"].startswith("body.decline_code: ")
    assert "body.fault" not in response.json()["detail"]
    assert fault_rules(client) == []


@pytest.mark.parametrize(
    "fault", ["unavailable", "latency", "error_after_commit", "lookup_unavailable"]
)
def test_decline_code_on_another_fault_is_400_and_not_armed(
    client: httpx.Client, fault: str
) -> None:
    response = client.post("/_faults", json={"fault": fault, "decline_code": "card_declined"})

    assert response.status_code == 400
    assert response.json() == {
        "error": "invalid_request",
        "detail": f"decline_code applies only to decline, not to {fault}",
    }
    assert fault_rules(client) == []


def test_delay_s_on_decline_is_400_and_not_armed(client: httpx.Client) -> None:
    response = client.post("/_faults", json={"fault": "decline", "delay_s": 1})

    assert response.status_code == 400
    assert response.json()["detail"].endswith("not to decline")
    assert fault_rules(client) == []
