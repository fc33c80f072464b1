"""Request and response bodies of the notifications' admin API (`notify_admin.py`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from fake_provider.merchants import DEVELOPMENT_MERCHANT, MERCHANT_PATTERN
from fake_provider.notify_events import SECRET_PATTERN, URL_PATTERN
from fake_provider.notify_outbox import OutboxState

MerchantName = Annotated[StrictStr, Field(pattern=f"^{MERCHANT_PATTERN}$")]


class EndpointRequest(BaseModel):
    """The body of `PUT /_notifications`: where a merchant's events go, signed with what."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: Annotated[StrictStr, Field(pattern=URL_PATTERN, max_length=2048)]
    secret: Annotated[StrictStr, Field(pattern=SECRET_PATTERN)]
    merchant: MerchantName = DEVELOPMENT_MERCHANT


class EndpointView(BaseModel):
    """A merchant's endpoint (never its secret; `url` None: none) and what its events came
    to: attempts made (`sent`), events' copies `delivered`, still to send (`pending`, held
    ones included), given up (`failed`) and never sent (`dropped`)."""

    merchant: str
    url: str | None
    sent: int
    delivered: int
    pending: int
    failed: int
    dropped: int


class AttemptView(BaseModel):
    """One attempt to send a copy of an event: when (unix seconds), and what came back."""

    started_at: float
    finished_at: float
    # The receiver's HTTP status; None when there was no answer (`error` says why).
    status: int | None
    error: str | None
    # Sent before the answer of the call that made the record (`notify_early`).
    early: bool


class DeliveryView(BaseModel):
    """One copy of an event to send (a `notify_duplicate` makes several)."""

    # Numbered from 1 (`copy` on the wire: the name is BaseModel's).
    copy_number: int = Field(alias="copy")
    state: OutboxState
    attempts: list[AttemptView]
    # When the next attempt is due (unix seconds); None unless `pending`.
    next_attempt_at: float | None
    # Why it was given up (`failed`).
    reason: str | None


class EventView(BaseModel):
    """An event made, as `GET /_notifications/events` lists it: `body` is exactly what is
    sent; `made_up` marks the extra event of a `notify_unknown_key`."""

    id: str
    type: str
    charge_id: str
    idempotency_key: str
    merchant: str
    url: str
    created: int
    fault: str | None
    made_up: bool
    body: str
    deliveries: list[DeliveryView]


class EventList(BaseModel):
    """Every event made, oldest first."""

    events: list[EventView]
