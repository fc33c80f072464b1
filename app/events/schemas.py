"""OpenAPI shapes of events (the handlers build the JSON themselves, see views.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class EventOut(BaseModel):
    id: str = Field(description="`evt_` + 32 hex digits; stable across redeliveries")
    type: str = Field(description="payment.succeeded, payment.declined, payment.failed, ...")
    created_at: str
    tenant: str
    data: dict[str, Any] = Field(description="The payment (or refund) representation")


class EventList(BaseModel):
    data: list[EventOut]
    has_more: bool
