"""The operation representation, as documented in the OpenAPI description."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from app.operations.values import OperationName

# What a client may send as a key in the lookup's query: the key as stored, unquoted.
KEY_QUERY_PATTERN = r"^[\x21-\x7E]+$"
KEY_QUERY_DESCRIPTION = "The key as stored: unquoted, 1-255 visible ASCII characters"
OPERATION_QUERY_DESCRIPTION = (
    "The key's scope: `create_payment` (default), `create_refund`, `capture_payment` or "
    "`void_payment`"
)


class LookupQuery(BaseModel):
    """`GET /operations?idempotency_key=K&operation=O`, validated by the route itself rather
    than declared as FastAPI query parameters, so that the lookup can be a fast route
    (`app/main.py`); the messages are pydantic's, as FastAPI's would be."""

    idempotency_key: Annotated[str, Field(min_length=1, max_length=255, pattern=KEY_QUERY_PATTERN)]
    operation: OperationName = OperationName.CREATE_PAYMENT


# The lookup's query parameters as the OpenAPI document describes them.
LOOKUP_PARAMETERS: list[dict[str, Any]] = [
    {
        "name": "idempotency_key",
        "in": "query",
        "required": True,
        "description": KEY_QUERY_DESCRIPTION,
        "schema": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": KEY_QUERY_PATTERN,
            "title": "Idempotency Key",
        },
    },
    {
        "name": "operation",
        "in": "query",
        "required": False,
        "description": OPERATION_QUERY_DESCRIPTION,
        "schema": {
            "type": "string",
            "enum": [name.value for name in OperationName],
            "default": OperationName.CREATE_PAYMENT.value,
            "title": "Operation",
        },
    },
]


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
    payment_id: str = Field(
        description="The payment created, or (create_refund, capture_payment, void_payment) "
        "acted on"
    )
    refund_id: str | None = Field(description="The refund a create_refund operation creates")
    capture_id: str | None = Field(
        default=None, description="Only for capture_payment: the capture it creates"
    )
    void_id: str | None = Field(default=None, description="Only for void_payment: the void")
    attempts: int = Field(description="Recovery checks that could not settle the outcome")
    needs_attention: bool = Field(description="Past the attempts limit; a person should look")
    next_check_at: str | None
    created_at: str
    updated_at: str
    result: ResultOut | None
    history: list[TransitionOut]
