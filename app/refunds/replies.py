"""The answers stored for a refund's final outcomes (pure; `idempotency/replies.py` renders)."""

from __future__ import annotations

import uuid
from datetime import datetime

from app.errors import PROBLEM_JSON, dump_json, problem_body
from app.idempotency.replies import JSON, stored_reply
from app.operations.values import StoredResponse
from app.provider.client import ProviderRefund
from app.refunds.rows import RefundRow, RefundStatus
from app.refunds.views import refund_json


def refunded(refund: RefundRow, found: ProviderRefund, *, at: datetime) -> StoredResponse:
    """The answer stored for a refund the provider made: 201 with the refund."""
    body = refund_json(
        refund,
        status=RefundStatus.SUCCEEDED.value,
        provider_refund_id=found.refund_id,
        updated_at=at,
    )
    return stored_reply(201, JSON, dump_json(body), {"location": refund_location(refund.id)})


def rejected(refund: RefundRow, detail: str, *, operation_id: uuid.UUID) -> StoredResponse:
    """The answer stored when the provider refused the refund: 502, nothing refunded."""
    problem = problem_body(
        status=502,
        code="PROVIDER_REJECTED",
        title="Provider rejected the refund",
        detail=f"the provider rejected the refund; nothing was refunded: {detail}",
        refund_id=str(refund.id),
        payment_id=str(refund.payment_id),
        operation_id=str(operation_id),
    )
    return stored_reply(502, PROBLEM_JSON, dump_json(problem), {})


def refund_location(refund_id: uuid.UUID) -> str:
    return f"/refunds/{refund_id}"
