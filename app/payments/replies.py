"""HTTP rendering of the payment path, in one pure module: typed answers in, replies out.

Two kinds of caller: the charge driver renders the answer it stores with a final outcome,
inside the transaction that records it (so a replay is byte for byte the first answer); the
router renders whatever the create flow returned. Nothing here touches the database.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.errors import PROBLEM_JSON, dump_json, problem_body
from app.operations.outcomes import Declined, NotSent, Rejected, Succeeded
from app.operations.refs import StoredResponse
from app.payments.models import PaymentRow
from app.payments.schemas import payment_json
from app.payments.status import PaymentStatus
from app.provider.client import Charge

JSON = "application/json"


@dataclass(frozen=True)
class Replay:
    """A terminal operation's stored answer, for a request that repeats its key."""

    stored: StoredResponse


@dataclass(frozen=True)
class Pending:
    """The outcome is not known yet: the operation as it stands, and when to ask again."""

    operation: dict[str, Any]
    retry_after_s: int


Answer = Succeeded | Declined | Rejected | NotSent | Replay | Pending


@dataclass(frozen=True)
class Reply:
    """Status, headers and body of one answer."""

    status: int
    body: bytes
    media_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)


def render(answer: Answer) -> Reply:
    """The HTTP reply for what the create flow returned."""
    match answer:
        case Succeeded(stored=stored) | Declined(stored=stored) | Rejected(stored=stored):
            return _from_stored(stored, replayed=False)
        case Replay(stored=stored):
            return _from_stored(stored, replayed=True)
        case NotSent():
            return _problem(
                503,
                problem_body(
                    status=503,
                    code="PROVIDER_UNAVAILABLE",
                    title="Provider unavailable",
                    detail="the provider did not process the payment; retry with the same "
                    "Idempotency-Key",
                    payment_id=str(answer.payment_id),
                    operation_id=str(answer.operation_id),
                ),
                {"retry-after": str(answer.retry_after_s)},
            )
        case Pending():
            operation_id = answer.operation["operation_id"]
            return Reply(
                202,
                dump_json(answer.operation),
                JSON,
                {
                    "location": operation_location(operation_id),
                    "retry-after": str(answer.retry_after_s),
                },
            )


def charged(
    payment: PaymentRow, charge: Charge, *, operation_id: uuid.UUID, at: datetime
) -> StoredResponse:
    """The answer stored for a charge the provider processed: 201, or 402 if declined."""
    if charge.status == "succeeded":
        body = payment_json(
            payment,
            status=PaymentStatus.SUCCEEDED.value,
            provider_charge_id=charge.charge_id,
            updated_at=at,
        )
        return _stored(201, JSON, dump_json(body), {"location": payment_location(payment.id)})
    code = charge.decline_code or "declined"
    problem = problem_body(
        status=402,
        code=code,
        title="Payment declined",
        detail=f"the provider declined the payment ({code})",
        payment_id=str(payment.id),
        operation_id=str(operation_id),
    )
    return _stored(402, PROBLEM_JSON, dump_json(problem), {})


def rejected(payment: PaymentRow, detail: str, *, operation_id: uuid.UUID) -> StoredResponse:
    """The answer stored when the provider refused the request as invalid: 502."""
    text = f"the provider rejected the request; nothing was charged: {detail}"
    return _failed(payment, text, operation_id=operation_id)


def not_charged(payment: PaymentRow, detail: str, *, operation_id: uuid.UUID) -> StoredResponse:
    """The answer stored when an operator resolved the payment as not charged: 502.

    The same answer as every FAILED payment (`PROVIDER_REJECTED`: final, nothing charged), so
    clients need no new case; the detail says how it came about.
    """
    return _failed(payment, f"nothing was charged: {detail}", operation_id=operation_id)


def _failed(payment: PaymentRow, detail: str, *, operation_id: uuid.UUID) -> StoredResponse:
    problem = problem_body(
        status=502,
        code="PROVIDER_REJECTED",
        title="Provider rejected the payment",
        detail=detail,
        payment_id=str(payment.id),
        operation_id=str(operation_id),
    )
    return _stored(502, PROBLEM_JSON, dump_json(problem), {})


def retry_after_s(next_check_at: datetime | None, now: datetime) -> int:
    """Seconds a client should wait before asking about a pending operation (1 to 60)."""
    if next_check_at is None:
        return 1
    return min(60, max(1, math.ceil((next_check_at - now).total_seconds())))


def operation_location(operation_id: uuid.UUID | str) -> str:
    return f"/operations/{operation_id}"


def payment_location(payment_id: uuid.UUID) -> str:
    return f"/payments/{payment_id}"


def _stored(status: int, media_type: str, body: bytes, headers: dict[str, str]) -> StoredResponse:
    return StoredResponse(status=status, headers={"content-type": media_type, **headers}, body=body)


def _from_stored(stored: StoredResponse, *, replayed: bool) -> Reply:
    headers = dict(stored.headers)
    media_type = headers.pop("content-type", JSON)
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return Reply(status=stored.status, body=stored.body, media_type=media_type, headers=headers)


def _problem(status: int, body: dict[str, Any], headers: dict[str, str]) -> Reply:
    return Reply(status=status, body=dump_json(body), media_type=PROBLEM_JSON, headers=headers)
