"""Tenants see who moved an operation only as a neutral actor, and never why.

The audit trail names API and worker processes (with their host and pid) and operators, and
its reasons hold free text: a provider's error message and address, what an operator wrote.
Operators read all of it under `/admin/`; a tenant reads `system`, `provider` or `operator`
and no reason.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import httpx
import psycopg
from psycopg.rows import DictRow

from app.operations.history import tenant_actor
from app.operations.values import TransitionRow
from tests.support.factories.payments import new_key, payment_body, post_payment

OPERATOR_NOTE = "ticket 4711 from alice@10.1.2.3:8443, call back on +1 555 0100"


def _row(trigger: str, actor: str) -> TransitionRow:
    return TransitionRow(
        id=1,
        from_state=None,
        to_state="COMPLETED",
        trigger=trigger,
        actor=actor,
        reason="anything",
        fence=1,
        created_at=datetime.now(UTC),
    )


def test_each_actor_is_told_as_one_of_three() -> None:
    assert tenant_actor(_row("claim", "api:0123456789ab")) == "system"
    assert tenant_actor(_row("send", "api:0123456789ab")) == "system"
    assert tenant_actor(_row("lose", "worker:host-1:4242")) == "system"
    assert tenant_actor(_row("defer", "worker:host-1:4242")) == "system"
    assert tenant_actor(_row("complete", "worker:host-1:4242")) == "provider"
    assert tenant_actor(_row("fail", "api:0123456789ab")) == "provider"
    assert tenant_actor(_row("complete", "operator:alice")) == "operator"
    assert tenant_actor(_row("resend", "operator:alice")) == "operator"


def test_the_tenant_sees_neutral_actors_and_no_reasons_while_operators_see_all(
    api_without_provider: httpx.Client,
    admin_client: httpx.Client,
    db: psycopg.Connection[DictRow],
) -> None:
    # The provider cannot be reached: the reason recorded holds the connection's error.
    key = new_key()
    refused = post_payment(api_without_provider, payment_body(), key=key)
    assert refused.status_code == 503, refused.text
    operation_id = refused.json()["operation_id"]
    # And an operator's note, as a resolution records it.
    db.execute(
        "INSERT INTO operation_transitions"
        " (operation_id, tenant_id, from_state, to_state, trigger, actor, reason, fence,"
        " operation_created_at)"
        " SELECT id, tenant_id, 'FAILED_RETRYABLE', 'FAILED_RETRYABLE', 'defer',"
        " 'operator:alice', %s, 99, created_at FROM operations WHERE id = %s",
        (OPERATOR_NOTE, operation_id),
    )
    full = admin_client.get(f"/admin/operations/{operation_id}")
    assert full.status_code == 200, full.text
    recorded = full.json()["history"]
    assert any("could not reach the provider" in (h["reason"] or "") for h in recorded)
    assert any(h["actor"].startswith("api:") for h in recorded), recorded
    assert recorded[-1] == {**recorded[-1], "actor": "operator:alice", "reason": OPERATOR_NOTE}

    by_id = api_without_provider.get(f"/operations/{operation_id}")
    by_key = api_without_provider.get("/operations", params={"idempotency_key": key})

    for answer in (by_id, by_key):
        assert answer.status_code == 200, answer.text
        history = answer.json()["history"]
        assert [h["actor"] for h in history] == [
            "operator" if h["actor"].startswith("operator:") else "system" for h in recorded
        ]
        assert all(h["reason"] is None for h in history), history
        assert [h["to_state"] for h in history] == [h["to_state"] for h in recorded]
        for secret in ("alice", "10.1.2.3", "could not reach", "Connection refused", "api:"):
            assert secret not in answer.text, secret


def test_an_operation_never_seen_is_not_found(api_without_provider: httpx.Client) -> None:
    assert api_without_provider.get(f"/operations/{uuid.uuid4()}").status_code == 404
