"""The admin representations of webhook deliveries: an operation's events with their
deliveries, and a failed delivery in the cross-tenant list.

Ids are the public ones the tenant's API uses (`evt_`, `we_`, `wd_`), so an operator and a
tenant speak of the same objects.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.clock import iso
from app.events.views import public_id as event_public_id
from app.webhooks.operator_reads import DeliveryView, EventDeliveries, FailedDelivery
from app.webhooks.views import DELIVERY_PREFIX, ENDPOINT_PREFIX


def delivery_json(delivery: DeliveryView) -> dict[str, Any]:
    """One delivery: where to, its status, how many attempts, the last one, the next one."""
    last = None
    if delivery.last_attempt_at is not None:
        last = {
            "at": iso(delivery.last_attempt_at),
            "status_code": delivery.last_status_code,
            "error": delivery.last_error,
            "latency_ms": delivery.last_latency_ms,
        }
    return {
        "id": DELIVERY_PREFIX + delivery.id.hex,
        "endpoint_id": ENDPOINT_PREFIX + delivery.endpoint_id.hex,
        "url": delivery.url,
        "endpoint_deleted": delivery.endpoint_deleted,
        "status": delivery.status,
        "attempt_count": delivery.attempt_count,
        "last_attempt": last,
        "next_attempt_at": _iso(delivery.next_attempt_at),
        "completed_at": _iso(delivery.completed_at),
    }


def event_json(event: EventDeliveries) -> dict[str, Any]:
    return {
        "id": event_public_id(event.id),
        "type": event.type,
        "created_at": iso(event.created_at),
        "deliveries": [delivery_json(d) for d in event.deliveries],
    }


def failed_json(failed: FailedDelivery) -> dict[str, Any]:
    """A failed delivery with its tenant, event and operation."""
    return {
        **delivery_json(failed.delivery),
        "tenant_id": str(failed.tenant_id),
        "event_id": event_public_id(failed.event_id),
        "event_type": failed.event_type,
        "operation_id": str(failed.operation_id),
    }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else iso(moment)
