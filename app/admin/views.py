"""The admin representations: an operation across tenants, and its detail."""

from __future__ import annotations

from typing import Any

from app.admin.delivery_views import event_json
from app.admin.operators import Detail, ProviderView
from app.clock import iso
from app.operations.history import full_history
from app.operations.operator_reads import Overview
from app.operations.values import Snapshot
from app.operations.views import operation_json


def admin_operation_json(snapshot: Snapshot, *, with_history: bool) -> dict[str, Any]:
    """The tenant's representation of the operation, plus what only operators see."""
    operation = snapshot.operation
    body = operation_json(snapshot)
    if with_history:
        # Operators see who acted by name, and why: the tenant's view hides both.
        body["history"] = full_history(snapshot.history)
    else:
        del body["history"]
    lease = operation.lease_expires_at
    body.update(
        {
            "tenant_id": str(operation.tenant_id),
            "last_error": operation.last_error,
            "lease_owner": operation.lease_owner if snapshot.lease_live else None,
            "lease_expires_at": iso(lease) if snapshot.lease_live and lease else None,
            "completed_at": None if operation.completed_at is None else iso(operation.completed_at),
        }
    )
    return body


def provider_json(view: ProviderView | None) -> dict[str, Any] | None:
    """The live lookup: `reachable`, the provider's record under its name (`charge` or
    `refund`, null when it holds none), the error if unreachable."""
    if view is None:
        return None
    return {"reachable": view.reachable, view.record_name: view.record, "error": view.error}


def detail_json(detail: Detail) -> dict[str, Any]:
    """An operation with its history, its business object, the provider's view, and its
    events with their webhook deliveries."""
    body = admin_operation_json(detail.snapshot, with_history=True)
    subject = detail.subject
    body["subject"] = None if subject is None else {"type": subject.noun, **subject.body}
    body["payment"] = subject.body if subject is not None and subject.noun == "payment" else None
    body["provider"] = provider_json(detail.provider)
    body["events"] = [event_json(event) for event in detail.events]
    return body


def overview_json(overview: Overview) -> dict[str, Any]:
    return {
        "counts": overview.counts,
        "needs_attention": overview.needs_attention,
        "oldest_in_flight_s": overview.oldest_in_flight_s,
    }
