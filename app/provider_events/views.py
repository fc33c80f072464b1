"""The inbox's representations for operators: an event in the list, and its detail (the
same with the body the provider sent). Never a signature: none is kept."""

from __future__ import annotations

from typing import Any

from app.clock import iso
from app.provider_events.operator_reads import InboxEvent


def inbox_event_json(event: InboxEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "provider": event.provider,
        "event_id": event.event_id,
        "type": event.type,
        "provider_key": event.provider_key,
        "state": event.state.value,
        "reason": event.reason,
        "attempts": event.attempts,
        "received_at": iso(event.received_at),
        "applied_at": None if event.applied_at is None else iso(event.applied_at),
        "operation_id": None if event.operation_id is None else str(event.operation_id),
    }


def inbox_detail_json(event: InboxEvent, body: dict[str, Any]) -> dict[str, Any]:
    return {**inbox_event_json(event), "body": body}
