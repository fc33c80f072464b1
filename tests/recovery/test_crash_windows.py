"""SIGKILL of the real API process inside each crash window, then recovery by a worker.

Windows (held open with failpoints or a provider that commits but never answers):
- after the claim, before the provider call: nothing charged yet; recovery looks the charge
  up, finds nothing, and sends it with the same derived key;
- after the provider committed, before the outcome was recorded: recovery finds the charge
  by lookup and records it, never charging again.
In every case the client that lost its connection gets the final answer on retry, replayed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER
from tests.support.factories.payments import new_key, payment_body, post_in_background, post_payment
from tests.support.factories.tenants import TenantHandle
from tests.support.readers.ledger import (
    assert_agrees_with_ledger,
    assert_completed_once,
    ledger_by_key,
    wait_charged,
)
from tests.support.readers.operations import (
    operation,
    payment_for,
    transitions,
    wait_for_key_state,
    wait_for_state,
    wait_lease_expired,
)

# An API whose lease runs out quickly once it is dead; the lease outlives the provider call.
SHORT_LEASE = {"PAYMENTS_LEASE_S": "3", "PAYMENTS_PROVIDER_TIMEOUT_S": "1"}


def _assert_replays_final_answer(
    client: httpx.Client, db: psycopg.Connection[DictRow], key: str, body: dict[str, Any]
) -> httpx.Response:
    """A client retry to a healthy API replays the stored final answer."""
    replay = post_payment(client, body, key=key)
    stored = operation(db, replay.json()["operation_id"])
    assert replay.status_code == stored["response_status"], replay.text
    assert replay.headers["idempotent-replayed"] == "true"
    # Byte for byte what was stored.
    assert replay.text == stored["response_body"]
    return replay


def test_api_killed_after_claim_before_provider_call_is_sent_once_by_the_worker(
    background: ThreadPoolExecutor,
    spawn: Spawner,
    tenant: TenantHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    api = spawn.api(**SHORT_LEASE, PAYMENTS_FAILPOINTS="after_claim=60")
    key, body = new_key(), payment_body()
    answer = post_in_background(background, api, tenant, key, body)
    claimed = wait_for_key_state(db, tenant, key, "PROVIDER_REQUEST_SENT")
    api.kill()
    with pytest.raises(httpx.TransportError):
        answer.result(timeout=30)
    operation_id = claimed["id"]
    # The kill landed inside the window: claimed and marked sent, but never sent: nothing
    # charged.
    assert operation(db, operation_id)["state"] == "PROVIDER_REQUEST_SENT"
    assert faults.charges(idempotency_key=payment_for(db, operation_id)["provider_key"]) == []

    wait_lease_expired(db, operation_id)
    worker = spawn.worker(once=True)
    assert worker.wait_exit(timeout=60) == 0, worker.log()

    completion, charge = assert_completed_once(db, faults, operation_id)
    assert completion["actor"].startswith("worker:")
    assert completion["actor"].endswith(f":{worker.pid}")
    # The worker looked the charge up, found nothing, and sent it with the same key.
    assert [t["trigger"] for t in transitions(db, operation_id)] == [
        "claim",
        "send",
        "resend",
        "complete",
    ]
    replay = _assert_replays_final_answer(client, db, key, body)
    assert replay.status_code == 201
    assert replay.json()["status"] == "SUCCEEDED"
    assert replay.json()["provider_charge_id"] == charge["charge_id"]


@pytest.mark.parametrize(
    "window",
    ["provider_never_answers", "before_record_failpoint"],
)
def test_api_killed_after_provider_commit_is_completed_by_lookup_without_second_charge(
    background: ThreadPoolExecutor,
    window: str,
    spawn: Spawner,
    tenant: TenantHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
    provider: Process,
) -> None:
    key, body = new_key(), payment_body()
    if window == "provider_never_answers":
        # The provider commits, then holds the connection for 30 s; the API would give up
        # after its 5 s timeout, so the kill lands well inside the window.
        api = spawn.api(PAYMENTS_PROVIDER_TIMEOUT_S="5", PAYMENTS_LEASE_S="6")
        faults.add("timeout_after_commit", account_id=body["account_id"], delay_s=30)
    else:
        api = spawn.api(**SHORT_LEASE, PAYMENTS_FAILPOINTS="before_record=60")
    answer = post_in_background(background, api, tenant, key, body)
    sent = wait_for_key_state(db, tenant, key, "PROVIDER_REQUEST_SENT")
    provider_key = payment_for(db, sent["id"])["provider_key"]
    wait_charged(provider, provider_key)
    api.kill()
    with pytest.raises(httpx.TransportError):
        answer.result(timeout=30)
    operation_id = sent["id"]
    # Killed inside the window: charged at the provider, nothing recorded here.
    assert operation(db, operation_id)["state"] == "PROVIDER_REQUEST_SENT"
    assert payment_for(db, operation_id)["status"] == "PENDING"

    # A worker already running takes over as soon as the dead API's lease runs out.
    spawn.worker(once=False, **FAST_WORKER)
    wait_for_state(db, operation_id, "COMPLETED", "FAILED", timeout=40)

    completion, charge = assert_completed_once(db, faults, operation_id)
    assert completion["actor"].startswith("worker:")
    assert "found by provider lookup" in (completion["reason"] or "")
    assert "FAILED" not in {t["to_state"] for t in transitions(db, operation_id)}
    replay = _assert_replays_final_answer(client, db, key, body)
    assert replay.status_code == 201
    assert replay.json()["provider_charge_id"] == charge["charge_id"]


def test_many_operations_killed_in_both_windows_all_end_terminal_charged_once(
    background: ThreadPoolExecutor,
    spawn: Spawner,
    tenant: TenantHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
    provider: Process,
) -> None:
    per_window = 5
    before_call = spawn.api(**SHORT_LEASE, PAYMENTS_FAILPOINTS="after_claim=60")
    before_record = spawn.api(**SHORT_LEASE, PAYMENTS_FAILPOINTS="before_record=60")
    # One of each window is a decline: a definite outcome that must be found, not re-sent.
    accounts = ["acc_decline_insufficient_funds"] + [
        payment_body()["account_id"] for _ in range(per_window - 1)
    ]
    unsent = [(new_key(), payment_body(account_id=a)) for a in accounts]
    unrecorded = [(new_key(), payment_body(account_id=a)) for a in accounts]

    answers = [post_in_background(background, before_call, tenant, k, b) for k, b in unsent]
    answers += [post_in_background(background, before_record, tenant, k, b) for k, b in unrecorded]
    ids = [wait_for_key_state(db, tenant, k, "PROVIDER_REQUEST_SENT")["id"] for k, _ in unsent]
    sent_ids = [
        wait_for_key_state(db, tenant, k, "PROVIDER_REQUEST_SENT")["id"] for k, _ in unrecorded
    ]
    for operation_id in sent_ids:
        provider_key = payment_for(db, operation_id)["provider_key"]
        wait_charged(provider, provider_key)
    before_call.kill()
    before_record.kill()
    for answer in answers:
        with pytest.raises(httpx.TransportError):
            answer.result(timeout=30)
    assert {operation(db, i)["state"] for i in ids + sent_ids} == {"PROVIDER_REQUEST_SENT"}
    for operation_id in ids:
        # Killed before its call: nothing charged under its key.
        assert faults.charges(idempotency_key=payment_for(db, operation_id)["provider_key"]) == []

    for operation_id in ids + sent_ids:
        wait_lease_expired(db, operation_id)
    workers = [spawn.worker(once=True), spawn.worker(once=True)]
    for worker in workers:
        assert worker.wait_exit(timeout=60) == 0, worker.log()

    ledger = ledger_by_key(faults)
    for (key, body), operation_id in zip(unsent + unrecorded, ids + sent_ids, strict=True):
        row = operation(db, operation_id)
        assert row["state"] == "COMPLETED", row
        payment = payment_for(db, operation_id)
        charges = ledger.get(payment["provider_key"], [])
        assert len(charges) == 1, f"{key}: {charges}"
        expected = "declined" if body["account_id"].startswith("acc_decline_") else "succeeded"
        assert charges[0]["status"] == expected
        assert_agrees_with_ledger(db, operation_id, charges)
        completions = [t for t in transitions(db, operation_id) if t["to_state"] == "COMPLETED"]
        assert len(completions) == 1, completions
        replay = _assert_replays_final_answer(client, db, key, body)
        assert replay.status_code == (402 if expected == "declined" else 201)
