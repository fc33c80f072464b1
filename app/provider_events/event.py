"""A received event: the raw body read as an event, and what the inbox keeps of it."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from app.errors import ValidationFailed
from app.http.body import parse_json_object
from app.provider_events.errors import ProviderEventInvalid
from app.provider_events.schemas import ProviderEventIn


@dataclass(frozen=True)
class ReceivedEvent:
    """An authentic event: its id, type and our key, and its body as it came (JSON text)."""

    event_id: str
    type: str
    # The record's `idempotency_key` (our key at the provider), when it names one.
    provider_key: str | None
    body: str


def read_event(raw: bytes) -> ReceivedEvent:
    """`raw` as an event, or `ProviderEventInvalid` saying why it is not one."""
    try:
        data = parse_json_object(raw)
    except ValidationFailed as exc:
        raise ProviderEventInvalid(exc.detail) from None
    try:
        event = ProviderEventIn.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(p) for p in err["loc"]), "message": err["msg"]}
            for err in exc.errors()
        ]
        raise ProviderEventInvalid("the body is not a provider event", errors=errors) from None
    key = event.data.object.get("idempotency_key")
    return ReceivedEvent(
        event_id=event.id,
        type=event.type,
        provider_key=key if isinstance(key, str) else None,
        # parse_json_object read it as UTF-8 already.
        body=raw.decode(),
    )
