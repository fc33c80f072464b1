"""JSON of endpoints and deliveries, and their public ids (`we_...`, `wd_...`)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from app.clock import iso
from app.events.views import public_id as event_public_id
from app.webhooks.delivery_reads import AttemptRow, DeliveryRow
from app.webhooks.endpoints import EndpointRow

ENDPOINT_PREFIX = "we_"
DELIVERY_PREFIX = "wd_"


def parse_id(text: str, prefix: str) -> uuid.UUID | None:
    if not text.startswith(prefix) or len(text) != len(prefix) + 32:
        return None
    try:
        return uuid.UUID(hex=text.removeprefix(prefix))
    except ValueError:
        return None


def endpoint_json(endpoint: EndpointRow, *, with_secret: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": ENDPOINT_PREFIX + endpoint.id.hex,
        "url": endpoint.url,
        "event_types": endpoint.event_types,
        "created_at": iso(endpoint.created_at),
    }
    if with_secret:
        body["secret"] = endpoint.secret
    return body


def delivery_json(delivery: DeliveryRow, attempts: list[AttemptRow]) -> dict[str, Any]:
    return {
        "id": DELIVERY_PREFIX + delivery.id.hex,
        "event_id": event_public_id(delivery.event_id),
        "event_type": delivery.event_type,
        "status": delivery.status,
        "attempt_count": delivery.attempt_count,
        "next_attempt_at": _iso(delivery.next_attempt_at),
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "created_at": iso(delivery.created_at),
        "updated_at": iso(delivery.updated_at),
        "completed_at": _iso(delivery.completed_at),
        "attempts": [
            {
                "attempted_at": iso(a.attempted_at),
                "succeeded": a.succeeded,
                "status_code": a.status_code,
                "error": a.error,
                "latency_ms": a.latency_ms,
            }
            for a in attempts
        ],
    }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else iso(moment)
