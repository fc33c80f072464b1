"""The event representation, and its public id (`evt_` + 32 hex digits)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from app.clock import iso
from app.events.reads import EventRow

PREFIX = "evt_"


def public_id(event_id: uuid.UUID) -> str:
    return PREFIX + event_id.hex


def parse_id(text: str) -> uuid.UUID | None:
    """The event's uuid for a public id; None for anything that is not one."""
    if not text.startswith(PREFIX) or len(text) != len(PREFIX) + 32:
        return None
    try:
        return uuid.UUID(hex=text.removeprefix(PREFIX))
    except ValueError:
        return None


def event_json(event: EventRow) -> dict[str, Any]:
    """`{id, type, created_at, tenant, data}`: the same in the feed and in every webhook."""
    return {
        "id": public_id(event.id),
        "type": event.type,
        "created_at": iso(event.created_at),
        "tenant": str(event.tenant_id),
        "data": event.data,
    }


def event_body(event: EventRow) -> bytes:
    """`event_json` as bytes, the same on every attempt: every webhook's body and every
    broker message's (`app/broker/exchange.py`)."""
    return json.dumps(event_json(event), separators=(",", ":")).encode()
