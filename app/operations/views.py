"""The operation representation, used by `GET /operations` and by `202` answers."""

from __future__ import annotations

import json
from typing import Any

from app.clock import iso
from app.operations.history import tenant_history
from app.operations.states import TERMINAL
from app.operations.values import Snapshot


def operation_json(snapshot: Snapshot) -> dict[str, Any]:
    """The operation with its result (once terminal) and its audited history.

    The tenant's view: the history names neutral actors and no reasons (see
    `app.operations.history`). The snapshot must have been read `with_history` (which
    reads its links too).
    """
    operation = snapshot.operation
    links = operation.links or {}
    result: dict[str, Any] | None = None
    if operation.response_status is not None and operation.state in TERMINAL:
        body = None if operation.response_body is None else json.loads(operation.response_body)
        result = {"status_code": operation.response_status, "body": body}
    return {
        "operation_id": str(operation.id),
        "operation": operation.operation_name,
        "idempotency_key": operation.idempotency_key,
        "state": operation.state,
        # What it acts on, as its kind's table holds it (the `operation_links` view):
        # always a payment and a refund id (null unless a refund's), and any other id its
        # kind links (a capture's, a void's).
        "payment_id": links.get("payment_id"),
        "refund_id": links.get("refund_id"),
        **links,
        "attempts": operation.attempts,
        "needs_attention": operation.needs_attention,
        "next_check_at": None if operation.next_check_at is None else iso(operation.next_check_at),
        "created_at": iso(operation.created_at),
        "updated_at": iso(operation.updated_at),
        "result": result,
        "history": tenant_history(snapshot.history),
    }
