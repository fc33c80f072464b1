"""Operators act on a refund's operation as on a payment's: the provider's refund decides.

A refund whose answer was lost and whose lookups keep failing ends `needs_attention`; the
detail shows the refund and the provider's record under the refund's key; resolve is
refused when it contradicts the provider and recorded when it agrees, and the client's retry
with its key replays what was recorded, with exactly one refund at the provider.
"""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key
from tests.support.factories.refunds import paid, post_refund, refund_body


def _flagged_refund(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> tuple[dict[str, Any], str, dict[str, Any], str]:
    """A refund the provider made whose answer was lost, then flagged by failed lookups."""
    payment = paid(client)
    account = payment["account_id"]
    faults.add("error_after_commit", account_id=account)
    faults.add("lookup_unavailable", account_id=account, times=1000)
    key, body = new_key(), refund_body(amount="3.00")
    first = post_refund(client, payment["payment_id"], body, key=key)
    assert first.status_code == 202, first.text
    operation_id: str = first.json()["operation_id"]

    def flagged() -> bool:
        # Each retry with the key reconciles inline: one failed lookup, one attempt.
        db.execute("UPDATE operations SET next_check_at = now() WHERE id = %s", (operation_id,))
        post_refund(client, payment["payment_id"], body, key=key)
        row = db.execute(
            "SELECT needs_attention FROM operations WHERE id = %s", (operation_id,)
        ).fetchone()
        return bool(row and row["needs_attention"])

    wait_until(flagged, timeout=60, interval=0.05, message="the refund to be flagged")
    return payment, key, body, operation_id


def test_a_flagged_refund_is_resolved_only_as_the_provider_says(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    payment, key, body, operation_id = _flagged_refund(client, faults, db)
    faults.clear()

    detail = admin_client.get(f"/admin/operations/{operation_id}").json()
    assert detail["subject"]["type"] == "refund"
    assert detail["subject"]["status"] == "PENDING"
    provider_refund = detail["provider"]["refund"]
    assert provider_refund is not None
    assert provider_refund["status"] == "succeeded"

    path = f"/admin/operations/{operation_id}/resolve"
    wrong = admin_client.post(path, json={"outcome": "not_charged", "reason": "a guess"})
    assert wrong.status_code == 409, wrong.text
    assert wrong.json()["code"] == "RESOLUTION_CONTRADICTS_PROVIDER"

    right = admin_client.post(path, json={"outcome": "charged", "reason": "provider confirms"})
    assert right.status_code == 200, right.text
    assert (right.json()["state"], right.json()["result"]["status_code"]) == ("COMPLETED", 201)

    replay = post_refund(client, payment["payment_id"], body, key=key)
    assert replay.status_code == 201, replay.text
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json()["status"] == "SUCCEEDED"
    assert client.get(f"/payments/{payment['payment_id']}").json()["amount_refunded"] == "3.00"
    assert len(faults.refunds(charge_id=payment["provider_charge_id"])) == 1
