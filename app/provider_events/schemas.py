"""The notification's shape on the wire, and the answer's (also the OpenAPI description).

    {"id": "evt_...", "type": "charge.succeeded", "created": <unix seconds>,
     "data": {"object": {...the record, with its idempotency_key...}}}

Other members are allowed and kept: a provider may add some. Any `type` is taken: what
it means is decided when the event is applied, not while the provider waits.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

# Visible ASCII: ids and types are written to logs and compared as they are.
_VISIBLE = r"^[\x21-\x7e]+$"


class EventData(BaseModel):
    model_config = ConfigDict(extra="allow")

    object: dict[str, Any] = Field(
        description="The provider's record the event is about (a charge, a refund, a "
        "capture, a void), as its lookup answers it; `idempotency_key` names ours"
    )


class ProviderEventIn(BaseModel):
    """A provider's event, as signed and sent."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1, max_length=255, pattern=_VISIBLE)
    type: str = Field(min_length=1, max_length=128, pattern=_VISIBLE)
    created: StrictInt = Field(ge=0, description="When the provider made it, unix seconds")
    data: EventData


class ReceivedOut(BaseModel):
    """The acknowledgement: the event is kept (now, or by an earlier delivery)."""

    received: bool
    duplicate: bool | None = Field(
        default=None, description="`true` when an earlier delivery of this event id was kept"
    )
