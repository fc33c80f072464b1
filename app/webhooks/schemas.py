"""Webhook endpoint requests and the OpenAPI shapes of endpoints and deliveries."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator

from app.events.rows import EventType


class CreateEndpointRequest(BaseModel):
    """`POST /webhook-endpoints`: where to send, and which event types (all when omitted)."""

    model_config = ConfigDict(extra="forbid")

    url: Annotated[StrictStr, Field(min_length=1, max_length=2048)]
    event_types: Annotated[list[StrictStr], Field(min_length=1, max_length=20)] | None = None

    @field_validator("event_types")
    @classmethod
    def _known_types(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        known = {t.value for t in EventType}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown event types {unknown}; known: {sorted(known)}")
        # Deduplicated, in the order first given.
        return list(dict.fromkeys(value))


class EndpointOut(BaseModel):
    id: str = Field(description="`we_` + 32 hex digits")
    url: str
    event_types: list[str] | None = Field(description="null: every event type")
    created_at: str
    secret: str | None = Field(
        default=None, description="`whsec_...`: only in the answer that creates or rotates it"
    )


class EndpointList(BaseModel):
    data: list[EndpointOut]
    has_more: bool


class AttemptOut(BaseModel):
    attempted_at: str
    succeeded: bool
    status_code: int | None
    error: str | None
    latency_ms: int


class DeliveryOut(BaseModel):
    id: str = Field(description="`wd_` + 32 hex digits")
    event_id: str
    event_type: str
    status: str = Field(description="pending, succeeded, failed (gave up) or cancelled")
    attempt_count: int
    next_attempt_at: str | None
    last_status_code: int | None
    last_error: str | None
    created_at: str
    updated_at: str
    completed_at: str | None
    attempts: list[AttemptOut]


class DeliveryList(BaseModel):
    data: list[DeliveryOut]
    has_more: bool


class RedeliveryOut(BaseModel):
    event_id: str
    deliveries_queued: int
