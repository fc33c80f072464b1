"""Fault rules on captures and voids: each fault commits (or not) as it does for a charge or a
refund, the lookup by key tells which, and a rule may be limited to one kind of call."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_provider.faults import CRASH_EXIT_STATUS
from tests.fake_provider.provider import (
    add_fault,
    authorize,
    charge_body,
    charge_by_key,
    fault_rules,
    new_account,
    new_key,
    post_capture,
    post_charge,
    post_void,
    start_provider,
)

KINDS = ["capture", "void"]
DELAY_S = 0.2
# fault -> (the status the caller sees, None for a connection closed unanswered; committed?)
FAULTS: dict[str, tuple[int | None, bool]] = {
    "latency": (201, True),
    "unavailable": (503, False),
    "timeout_before_commit": (None, False),
    "timeout_after_commit": (None, True),
    "error_after_commit": (500, True),
    "drop_after_commit": (None, True),
    "unavailable_after_commit": (503, True),
}
WAITING = {"latency", "timeout_before_commit", "timeout_after_commit"}


def sender(
    client: httpx.Client, kind: str, key: str, charge_id: str
) -> Callable[[], httpx.Response]:
    """The send of a capture of 400 (or a void) of `charge_id` under `key`."""
    if kind == "capture":
        return lambda: post_capture(client, key, charge_id, 400)
    return lambda: post_void(client, key, charge_id)


def lookup(client: httpx.Client, kind: str, key: str) -> httpx.Response:
    return client.get(f"/{kind}s", params={"idempotency_key": key})


def state(client: httpx.Client, charge: dict[str, Any]) -> tuple[int, bool]:
    now = charge_by_key(client, charge["idempotency_key"])
    return now["amount_captured_minor"], now["voided"]


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_on_a_capture_or_void_commits_as_on_a_charge_and_the_lookup_tells(
    client: httpx.Client, kind: str, fault: str
) -> None:
    charge = authorize(client, amount_minor=1000)
    seen, committed = FAULTS[fault]
    rule: dict[str, Any] = {"fault": fault, "account_id": charge["account_id"]}
    if fault in WAITING:
        rule["delay_s"] = DELAY_S
    add_fault(client, **rule)
    key = new_key()
    send = sender(client, kind, key, charge["charge_id"])

    if seen is None:
        with pytest.raises(httpx.RemoteProtocolError):
            send()
    else:
        answer = send()
        assert answer.status_code == seen, answer.text
    assert fault_rules(client) == []

    found = lookup(client, kind, key)
    assert found.status_code == (200 if committed else 404)
    after = {"capture": (400, False), "void": (0, True)}[kind] if committed else (0, False)
    assert state(client, charge) == after
    retry = send()
    assert retry.status_code == 201, retry.text
    assert ("Idempotent-Replayed" in retry.headers) == committed
    if committed:
        assert retry.json() == found.json()


@pytest.mark.parametrize("kind", KINDS)
def test_a_rule_matches_the_authorizations_account(client: httpx.Client, kind: str) -> None:
    charge, other = authorize(client), authorize(client)
    add_fault(client, fault="unavailable", account_id=charge["account_id"])

    spared = sender(client, kind, new_key(), other["charge_id"])()
    hit = sender(client, kind, new_key(), charge["charge_id"])()

    assert (spared.status_code, hit.status_code) == (201, 503)


@pytest.mark.parametrize("kind", KINDS)
def test_lookup_faults_apply_to_capture_and_void_lookups(client: httpx.Client, kind: str) -> None:
    charge = authorize(client)
    key = new_key()
    made = sender(client, kind, key, charge["charge_id"])()
    assert made.status_code == 201, made.text
    add_fault(client, fault="lookup_unavailable", account_id="acc_someone_else")
    add_fault(client, fault="lookup_unavailable", account_id=charge["account_id"])

    refused = lookup(client, kind, key)
    again = lookup(client, kind, key)
    add_fault(client, fault="lookup_latency", delay_s=DELAY_S, idempotency_key=key)
    started = time.monotonic()
    slow = lookup(client, kind, key)
    waited = time.monotonic() - started

    assert refused.status_code == 503
    assert refused.json() == {"error": "unavailable", "processed": False}
    assert (again.status_code, again.json()) == (200, made.json())
    assert (slow.status_code, slow.json()) == (200, made.json())
    assert waited >= DELAY_S
    # The rule for another account is still armed; the two that matched are used up.
    assert [rule["account_id"] for rule in fault_rules(client)] == ["acc_someone_else"]


@pytest.mark.parametrize("kind", KINDS)
def test_lookup_faults_spare_sends_and_send_faults_spare_lookups(
    client: httpx.Client, kind: str
) -> None:
    charge = authorize(client)
    key = new_key()
    add_fault(client, fault="lookup_unavailable")

    made = sender(client, kind, key, charge["charge_id"])()
    add_fault(client, fault="unavailable", idempotency_key=key)
    found = lookup(client, kind, key)

    assert made.status_code == 201
    assert found.status_code == 503
    assert [rule["fault"] for rule in fault_rules(client)] == ["unavailable"]


def test_a_rule_with_a_call_applies_to_that_kind_of_call_only(client: httpx.Client) -> None:
    account = new_account()
    rule = add_fault(client, fault="unavailable", account_id=account, call="capture")
    assert rule["call"] == "capture"
    charge = authorize(client, account_id=account)
    to_void = authorize(client, account_id=account)
    charge_id = charge["charge_id"]

    voided = post_void(client, new_key(), to_void["charge_id"])
    captured = post_capture(client, new_key(), charge_id, 100)
    assert (voided.status_code, captured.status_code) == (201, 503)

    add_fault(client, fault="unavailable", account_id=account, call="void")
    assert post_capture(client, new_key(), charge_id, 100).status_code == 201
    assert post_void(client, new_key(), charge_id).status_code == 503

    add_fault(client, fault="unavailable", account_id=account, call="refund")
    assert post_capture(client, new_key(), charge_id, 100).status_code == 201
    refunded = client.post(
        "/refunds",
        json={"charge_id": charge_id, "amount_minor": 100},
        headers={"Idempotency-Key": new_key()},
    )
    assert refunded.status_code == 503

    add_fault(client, fault="unavailable", account_id=account, call="charge")
    capture_key = new_key()
    assert post_capture(client, capture_key, charge_id, 100).status_code == 201
    assert post_charge(client, new_key(), charge_body(account_id=account)).status_code == 503

    add_fault(client, fault="lookup_unavailable", account_id=account, call="capture")
    assert client.get("/charges", params={"idempotency_key": charge["idempotency_key"]}).is_success
    assert lookup(client, "capture", capture_key).status_code == 503
    assert fault_rules(client) == []


@pytest.mark.parametrize(
    "rule",
    [
        {"fault": "unavailable", "call": "payment"},
        {"fault": "unavailable", "call": "Capture"},
        {"fault": "decline", "call": "capture"},
        {"fault": "decline", "call": "refund"},
    ],
    ids=["unknown-call", "wrong-case", "decline-on-captures", "decline-on-refunds"],
)
def test_a_call_a_rule_cannot_apply_to_is_400_and_not_armed(
    client: httpx.Client, rule: dict[str, Any]
) -> None:
    response = client.post("/_faults", json=rule)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert fault_rules(client) == []


def test_a_decline_limited_to_charges_is_armed(client: httpx.Client) -> None:
    account = new_account()
    add_fault(client, fault="decline", account_id=account, call="charge")

    declined = post_charge(client, new_key(), charge_body(account_id=account))

    assert declined.json()["status"] == "declined"


def test_captures_and_voids_survive_a_crash_after_commit(tmp_path: Path) -> None:
    db_path = tmp_path / "ledger.sqlite3"
    capture_key, void_key = new_key(), new_key()
    doomed = start_provider(db_path, tmp_path / "logs")
    try:
        with doomed.client() as client:
            charge = authorize(client, amount_minor=1000)
            assert post_capture(client, capture_key, charge["charge_id"], 250).status_code == 201
            add_fault(client, fault="crash_after_commit", call="void")
            with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                post_void(client, void_key, charge["charge_id"])
        assert doomed.process.wait_exit(timeout=30) == CRASH_EXIT_STATUS
    finally:
        doomed.process.kill()

    restarted = start_provider(db_path, tmp_path / "logs")
    try:
        with restarted.client() as client:
            after = charge_by_key(client, charge["idempotency_key"])
            void = lookup(client, "void", void_key)
            replay = post_void(client, void_key, charge["charge_id"])
            capture_replay = post_capture(client, capture_key, charge["charge_id"], 250)
            late_capture = post_capture(client, new_key(), charge["charge_id"], 1)
    finally:
        restarted.process.stop()

    assert (after["amount_captured_minor"], after["voided"]) == (250, True)
    assert void.status_code == 200
    assert void.json()["amount_released_minor"] == 750
    assert (replay.status_code, replay.json()) == (201, void.json())
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert capture_replay.headers["Idempotent-Replayed"] == "true"
    assert late_capture.status_code == 400
