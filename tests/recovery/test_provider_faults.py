"""Provider faults resolved by the worker: a lost answer is found, never guessed or re-charged.

- `error_after_commit`, `drop_after_commit`: charged, answer lost; the worker's lookup finds
  the charge (also when the fault hits the worker's own resend): COMPLETED, never FAILED.
- `timeout_before_commit`: not charged; the worker's lookup finds nothing and sends again
  with the same derived key: charged once, and the database agrees with the ledger.
- `crash_after_commit`: the provider dies right after committing; after its restart on the
  same ledger the worker finds the charge.
- `lookup_unavailable` beyond the attempts limit: the operation is flagged for a person,
  stays unknown with no outcome guessed, and is recovered once lookups work again.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import free_port
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WORKER
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.ledger import assert_agrees_with_ledger, assert_completed_once
from tests.support.readers.operations import (
    make_due,
    operation,
    payment_for,
    transitions,
    wait_for_state,
)

CRASH_EXIT_STATUS = 75


def _accepted_unknown(client: httpx.Client, key: str, body: dict[str, object]) -> str:
    """POST; the API answers 202 with the operation unknown. The operation id."""
    accepted = post_payment(client, body, key=key)
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["state"] == "UNKNOWN_REQUIRES_RECOVERY"
    operation_id: str = accepted.json()["operation_id"]
    return operation_id


@pytest.mark.parametrize("fault", ["error_after_commit", "drop_after_commit"])
def test_lost_answer_is_completed_by_the_worker_through_a_lookup(
    fault: str,
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add(fault, account_id=body["account_id"])
    operation_id = _accepted_unknown(client, key, body)
    make_due(db, operation_id)

    spawn.worker(once=False, **FAST_WORKER)
    wait_for_state(db, operation_id, "COMPLETED", "FAILED")

    completion, charge = assert_completed_once(db, faults, operation_id)
    assert completion["actor"].startswith("worker:")
    assert "found by provider lookup" in (completion["reason"] or "")
    assert "FAILED" not in {t["to_state"] for t in transitions(db, operation_id)}
    replay = post_payment(client, body, key=key)
    assert replay.status_code == 201
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json()["provider_charge_id"] == charge["charge_id"]


@pytest.mark.parametrize("fault", ["error_after_commit", "drop_after_commit"])
def test_lost_answer_to_the_workers_own_resend_is_found_on_its_next_check(
    fault: str,
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    # The API's call is never processed (it times out first); the worker's resend is
    # committed but its answer lost. Rules are used in creation order.
    faults.add("timeout_before_commit", account_id=body["account_id"], delay_s=3)
    faults.add(fault, account_id=body["account_id"])
    operation_id = _accepted_unknown(client, key, body)
    make_due(db, operation_id)

    spawn.worker(once=False, **FAST_WORKER)
    wait_for_state(db, operation_id, "COMPLETED", "FAILED")

    completion, _ = assert_completed_once(db, faults, operation_id)
    assert "found by provider lookup" in (completion["reason"] or "")
    history = transitions(db, operation_id)
    assert [(t["trigger"], t["to_state"]) for t in history] == [
        ("claim", "RECEIVED"),
        ("send", "PROVIDER_REQUEST_SENT"),
        ("lose", "UNKNOWN_REQUIRES_RECOVERY"),
        ("resend", "PROVIDER_REQUEST_SENT"),
        ("lose", "UNKNOWN_REQUIRES_RECOVERY"),
        ("complete", "COMPLETED"),
    ]
    assert all(t["actor"].startswith("worker:") for t in history[3:])
    assert operation(db, operation_id)["attempts"] >= 1


def test_timeout_before_commit_is_sent_again_by_the_worker_and_charged_once(
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("timeout_before_commit", account_id=body["account_id"], delay_s=3)
    operation_id = _accepted_unknown(client, key, body)
    provider_key = payment_for(db, operation_id)["provider_key"]
    # Not charged, and nothing recorded as if it were.
    uncharged = faults.charges(idempotency_key=provider_key)
    assert uncharged == []
    assert_agrees_with_ledger(db, operation_id, uncharged)
    make_due(db, operation_id)

    spawn.worker(once=False, **FAST_WORKER)
    wait_for_state(db, operation_id, "COMPLETED", "FAILED")

    completion, charge = assert_completed_once(db, faults, operation_id)
    assert completion["reason"] == "provider answered: succeeded"
    assert charge["idempotency_key"] == provider_key
    resend = [t for t in transitions(db, operation_id) if t["trigger"] == "resend"]
    assert len(resend) == 1
    assert resend[0]["actor"] == completion["actor"]
    payment = client.get(f"/payments/{payment_for(db, operation_id)['id']}").json()
    assert payment["status"] == "SUCCEEDED"
    assert payment["provider_charge_id"] == charge["charge_id"]


def test_provider_crash_after_commit_is_completed_after_its_restart(
    spawn: Spawner,
    tenant: TenantHandle,
    db: psycopg.Connection[DictRow],
    tmp_path: Path,
) -> None:
    ledger, port = tmp_path / "crash-ledger.sqlite3", free_port()
    crashing = spawn.provider(ledger, port=port)
    assert crashing.url is not None
    own_provider = {"PAYMENTS_PROVIDER_URL": crashing.url}
    api = spawn.api(**own_provider)
    key, body = new_key(), payment_body()
    FaultInjector(crashing.url).add("crash_after_commit", account_id=body["account_id"])
    with api_client(api, tenant) as http:
        operation_id = _accepted_unknown(http, key, body)
    assert crashing.wait_exit(timeout=30) == CRASH_EXIT_STATUS

    # While the provider is down a worker cannot find out: it stays unknown, no guess.
    make_due(db, operation_id)
    blind = spawn.worker(once=True, **own_provider)
    assert blind.wait_exit(timeout=60) == 0, blind.log()
    row = operation(db, operation_id)
    assert (row["state"], row["attempts"]) == ("UNKNOWN_REQUIRES_RECOVERY", 1)
    assert payment_for(db, operation_id)["status"] == "PENDING"

    restarted = spawn.provider(ledger, port=port)
    assert restarted.url is not None
    make_due(db, operation_id)
    worker = spawn.worker(once=True, **own_provider)
    assert worker.wait_exit(timeout=60) == 0, worker.log()

    completion, charge = assert_completed_once(db, FaultInjector(restarted.url), operation_id)
    assert "found by provider lookup" in (completion["reason"] or "")
    with api_client(api, tenant) as http:
        replay = post_payment(http, body, key=key)
    assert replay.status_code == 201
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json()["provider_charge_id"] == charge["charge_id"]


def test_lookups_failing_past_max_attempts_flag_the_operation_without_guessing(
    spawn: Spawner,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    max_attempts = 2
    key, body = new_key(), payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    # Far more failing lookups than the worker's attempts allow. Nothing in this test looks
    # the charge up itself until the rule is gone: that would use the rule up.
    faults.add("lookup_unavailable", account_id=body["account_id"], times=1000)
    operation_id = _accepted_unknown(client, key, body)
    make_due(db, operation_id)

    spawn.worker(once=False, **FAST_WORKER, PAYMENTS_MAX_ATTEMPTS=str(max_attempts))
    wait_until(
        lambda: bool(operation(db, operation_id)["needs_attention"]),
        interval=0.1,
        message="the operation to be flagged for attention",
    )

    flagged = client.get(f"/operations/{operation_id}").json()
    assert flagged["needs_attention"] is True
    assert flagged["state"] == "UNKNOWN_REQUIRES_RECOVERY"
    assert flagged["attempts"] >= max_attempts
    assert flagged["result"] is None
    assert flagged["next_check_at"] is not None
    assert "COMPLETED" not in {h["to_state"] for h in flagged["history"]}
    payment = client.get(f"/payments/{flagged['payment_id']}").json()
    assert payment["status"] == "PENDING"
    assert payment.get("provider_charge_id") is None
    row = operation(db, operation_id)
    assert (row["needs_attention"], row["response_status"]) == (True, None)

    faults.clear()
    wait_for_state(db, operation_id, "COMPLETED", "FAILED")

    recovered = client.get(f"/operations/{operation_id}").json()
    assert recovered["state"] == "COMPLETED"
    assert recovered["needs_attention"] is False
    assert recovered["result"]["status_code"] == 201
    assert operation(db, operation_id)["needs_attention"] is False
    _, charge = assert_completed_once(db, faults, operation_id)
    payment = client.get(f"/payments/{flagged['payment_id']}").json()
    assert payment["status"] == "SUCCEEDED"
    assert payment["provider_charge_id"] == charge["charge_id"]
