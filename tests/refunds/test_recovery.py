"""Refunds whose answer was lost, or whose API died, settled by recovery: refunded once.

The worker dispatches each operation it claims by name, so a refund is looked up at the
provider by its own derived key and, if found, recorded; never sent a second time.
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
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key
from tests.support.factories.refunds import paid, post_refund, refund_body, refund_in_background
from tests.support.factories.tenants import TenantHandle
from tests.support.readers.operations import (
    operation,
    refund_for,
    refund_operation,
    transitions,
    wait_for_state,
)


def _completed_once(
    db: psycopg.Connection[DictRow], faults: FaultInjector, operation_id: Any
) -> dict[str, Any]:
    row = operation(db, operation_id)
    assert row["state"] == "COMPLETED", row
    refund = refund_for(db, operation_id)
    ledger = faults.refunds(idempotency_key=refund["provider_key"])
    assert len(ledger) == 1, ledger
    assert refund["status"] == "SUCCEEDED"
    assert refund["provider_refund_id"] == ledger[0]["refund_id"]
    completions = [t for t in transitions(db, operation_id) if t["to_state"] == "COMPLETED"]
    assert len(completions) == 1
    assert "found by provider lookup" in (completions[0]["reason"] or "")
    return refund


def test_a_refund_whose_answer_was_lost_is_recovered_by_the_worker(
    spawn: Spawner,
    tenant: TenantHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    payment = paid(client)
    faults.add("timeout_after_commit", account_id=payment["account_id"], delay_s=5)
    key, body = new_key(), refund_body(amount="3.00")
    lost = post_refund(client, payment["payment_id"], body, key=key)
    assert lost.status_code == 202, lost.text
    assert lost.headers["location"] == f"/operations/{lost.json()['operation_id']}"
    operation_id = lost.json()["operation_id"]
    assert operation(db, operation_id)["state"] == "UNKNOWN_REQUIRES_RECOVERY"

    spawn.worker(once=False, **FAST_WORKER)
    wait_for_state(db, operation_id, "COMPLETED", "FAILED", timeout=40)
    refund = _completed_once(db, faults, operation_id)

    replay = post_refund(client, payment["payment_id"], body, key=key)
    assert replay.status_code == 201, replay.text
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json()["refund_id"] == str(refund["id"])
    after = client.get(f"/payments/{payment['payment_id']}").json()
    assert (after["status"], after["amount_refunded"]) == ("PARTIALLY_REFUNDED", "3.00")


def test_a_client_retry_settles_an_unknown_refund_inline(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> None:
    payment = paid(client)
    faults.add("drop_after_commit", account_id=payment["account_id"])
    key, body = new_key(), refund_body(amount="1.00")
    lost = post_refund(client, payment["payment_id"], body, key=key)
    assert lost.status_code == 202, lost.text
    retried = post_refund(client, payment["payment_id"], body, key=key)
    assert retried.status_code == 201, retried.text
    _completed_once(db, faults, lost.json()["operation_id"])


@pytest.mark.parametrize("failpoint", ["before_record", "after_claim"])
def test_api_killed_around_the_refund_call_then_recovered_and_replayed(
    failpoint: str,
    background: ThreadPoolExecutor,
    spawn: Spawner,
    tenant: TenantHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
    provider: Process,
) -> None:
    payment = paid(client)
    api = spawn.api(
        PAYMENTS_LEASE_S="3", PAYMENTS_PROVIDER_TIMEOUT_S="1", PAYMENTS_FAILPOINTS=f"{failpoint}=60"
    )
    key, body = new_key(), refund_body(amount="2.00")
    answer = refund_in_background(background, api, tenant, payment["payment_id"], key, body)
    found: list[dict[str, Any]] = []

    def claimed() -> bool:
        row = refund_operation(db, tenant, key)
        if row is None:
            return False
        found.append(row)
        return True

    wait_until(claimed, timeout=30, message="the refund's claim")
    refund = refund_for(db, found[-1]["id"])
    if failpoint == "before_record":
        # The provider has refunded; nothing is recorded here yet.
        wait_until(
            lambda: bool(faults.refunds(idempotency_key=refund["provider_key"])),
            timeout=30,
            message="the provider's refund",
        )
    api.kill()
    with pytest.raises(httpx.TransportError):
        answer.result(timeout=30)
    operation_id = found[-1]["id"]
    assert operation(db, operation_id)["state"] == "PROVIDER_REQUEST_SENT"
    assert refund_for(db, operation_id)["status"] == "PENDING"
    expected = 1 if failpoint == "before_record" else 0
    assert len(faults.refunds(idempotency_key=refund["provider_key"])) == expected

    spawn.worker(once=False, **FAST_WORKER)
    wait_for_state(db, operation_id, "COMPLETED", "FAILED", timeout=40)
    row = operation(db, operation_id)
    assert row["state"] == "COMPLETED", row
    assert len(faults.refunds(idempotency_key=refund["provider_key"])) == 1
    triggers = [t["trigger"] for t in transitions(db, operation_id)]
    assert triggers[-1] == "complete"
    assert ("resend" in triggers) == (failpoint == "after_claim")

    replay = post_refund(client, payment["payment_id"], body, key=key)
    assert replay.status_code == 201, replay.text
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.text == operation(db, operation_id)["response_body"]
    after = client.get(f"/payments/{payment['payment_id']}").json()
    assert after["amount_refunded"] == "2.00"
