"""The operation representation, as documented in the OpenAPI description."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class TransitionOut(BaseModel):
    """One audited state change."""

    from_state: str | None
    to_state: str
    trigger: str
    actor: str = Field(
        description="Who moved it: `system` (the service), `provider` (its answer settled "
        "the outcome) or `operator` (a person at the payment service)"
    )
    reason: str | None = Field(description="Always null here; operators see the reason")
    at: str


class ResultOut(BaseModel):
    """The stored outcome of a terminal operation (body null once expired)."""

    status_code: int
    body: dict[str, Any] | None


class OperationOut(BaseModel):
    """An idempotent operation: where it is, and what came of it."""

    operation_id: str
    operation: str = Field(description="The operation name, `create_payment` or `create_refund`")
    idempotency_key: str | None = Field(description="null once the key is released")
    state: str = Field(
        description="RECEIVED, PROVIDER_REQUEST_SENT, COMPLETED, FAILED, FAILED_RETRYABLE "
        "or UNKNOWN_REQUIRES_RECOVERY"
    )
    payment_id: str = Field(description="The payment created, or (create_refund) refunded")
    refund_id: str | None = Field(description="The refund a create_refund operation creates")
    attempts: int = Field(description="Recovery checks that could not settle the outcome")
    needs_attention: bool = Field(description="Past the attempts limit; a person should look")
    next_check_at: str | None
    created_at: str
    updated_at: str
    result: ResultOut | None
    history: list[TransitionOut]
