"""What an answer means: done, try again later, or stop with an error.

Pure functions from an `Answer` (or a transport error) to a decision; both clients run the
same decisions, so they cannot drift apart. The rule behind them: an idempotency key makes
every retry safe from double charges, so the client retries whatever is not a final answer,
and stops at once on what a retry can never change.

    answer                                   decision
    201 payment SUCCEEDED, or AUTHORIZED     Done
    202 outcome unknown yet                  Retry, paced by the server (Retry-After)
    409 IDEMPOTENCY_REQUEST_IN_PROGRESS      Retry, paced by the server (Retry-After)
    503, 500, 504, 429, 408, 425, other 502  Retry after a failure: backoff (never shorter
                                             than Retry-After), spends budget
    connection error, timeout                Retry after a failure: backoff, spends budget
    402 decline                              PaymentDeclined
    502 PROVIDER_REJECTED                    PaymentRejected
    409 PAYMENT_NOT_REFUNDABLE,
    422 REFUND_EXCEEDS_PAYMENT               RefundRefused
    409 PAYMENT_NOT_CAPTURABLE,
    422 CAPTURE_EXCEEDS_CAPTURABLE           CaptureRefused
    409 PAYMENT_NOT_VOIDABLE                 VoidRefused
    409 PAYMENT_MODIFICATION_IN_PROGRESS     ModificationInProgress
    422 IDEMPOTENCY_KEY_REUSED / _EXPIRED    IdempotencyKeyReused / IdempotencyKeyExpired
    422 VALIDATION_ERROR, 400, 413, 415      ValidationError
    401, 403                                 AuthenticationError
    404                                      NotFound
    anything else                            UnexpectedResponse

A 502 without the PROVIDER_REJECTED code did not come from this API (a proxy in between
answered): the request may or may not have reached it, so it is retried like a 503.

The refusals of a refund, capture or void depend on the payment, not on the request: nothing
was stored under the key and nothing sent, so they are raised at once (a retry would only ask
the same question of the same payment) and the caller may send the same key later on purpose.
That includes PAYMENT_MODIFICATION_IN_PROGRESS: another capture or void of the payment, under
another key, is in flight, and its outcome decides whether this one can still be made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from client.errors import (
    AuthenticationError,
    CaptureRefused,
    FieldError,
    IdempotencyKeyExpired,
    IdempotencyKeyReused,
    ModificationInProgress,
    NotFound,
    OutcomeUnknown,
    PaymentDeclined,
    PaymentRejected,
    PaymentsError,
    RefundRefused,
    UnexpectedResponse,
    ValidationError,
    VoidRefused,
)
from client.models import Operation, Payment, parse_operation, parse_payment
from client.wire import Answer

IN_PROGRESS = "IDEMPOTENCY_REQUEST_IN_PROGRESS"
KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
KEY_EXPIRED = "IDEMPOTENCY_KEY_EXPIRED"
PROVIDER_REJECTED = "PROVIDER_REJECTED"
REFUND_REFUSALS = frozenset({"PAYMENT_NOT_REFUNDABLE", "REFUND_EXCEEDS_PAYMENT"})
CAPTURE_REFUSALS = frozenset({"PAYMENT_NOT_CAPTURABLE", "CAPTURE_EXCEEDS_CAPTURABLE"})
NOT_VOIDABLE = "PAYMENT_NOT_VOIDABLE"
MODIFICATION_IN_PROGRESS = "PAYMENT_MODIFICATION_IN_PROGRESS"
#: What a payment the provider approved may show, whatever happened to it since: a one-step
#: success (refunded or not), or a manual payment's authorization (captured, voided, lapsed).
APPROVED_STATUSES = frozenset(
    {
        "SUCCEEDED",
        "PARTIALLY_REFUNDED",
        "REFUNDED",
        "AUTHORIZED",
        "PARTIALLY_CAPTURED",
        "CAPTURED",
        "VOIDED",
        "EXPIRED",
    }
)
#: Statuses that say "not now" rather than "no": retried with backoff.
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Done:
    """The payment succeeded (a manual one: it was authorized)."""

    payment: Payment


@dataclass(frozen=True)
class Fail:
    """Stop and raise `error`: a final answer, or a request a retry cannot fix."""

    error: PaymentsError


@dataclass(frozen=True)
class Retry:
    """Not final yet: try again (the same request, same key) after a wait."""

    #: Why, in words, for progress reports and for `OutcomeUnknown`.
    reason: str
    #: True after a failure (backoff grows, spends the retry budget); False when the server
    #: answered and said when to come back (202, 409, an operation still open).
    failure: bool
    status: int | None = None
    retry_after_s: float | None = None
    operation_id: str | None = None


@dataclass(frozen=True)
class FetchPayment:
    """The operation is final but its stored answer has expired: read the payment instead."""

    payment_id: str
    operation_id: str


Decision = Done | Fail | Retry
OperationDecision = Done | Fail | Retry | FetchPayment


def _str_member(body: Mapping[str, Any] | None, name: str) -> str | None:
    value = None if body is None else body.get(name)
    return value if isinstance(value, str) else None


def _field_errors(body: Mapping[str, Any] | None) -> list[FieldError]:
    raw = None if body is None else body.get("errors")
    if not isinstance(raw, list):
        return []
    return [
        FieldError(field=str(item.get("field", "")), message=str(item.get("message", "")))
        for item in raw
        if isinstance(item, Mapping)
    ]


def error_for(answer: Answer, *, key: str | None) -> PaymentsError | None:
    """The error an answer stands for when a retry cannot change it; None otherwise."""
    body = answer.body
    code = _str_member(body, "code")
    detail = _str_member(body, "detail") or f"the API answered HTTP {answer.status}"
    common: dict[str, Any] = {
        "status": answer.status,
        "code": code,
        "body": body,
        "operation_id": _str_member(body, "operation_id"),
        "payment_id": _str_member(body, "payment_id"),
        "idempotency_key": key,
    }
    status = answer.status
    if status == 402:
        return PaymentDeclined(detail, decline_code=code or "declined", **common)
    if status == 502 and code == PROVIDER_REJECTED:
        return PaymentRejected(detail, **common)
    if status in (409, 422) and code in REFUND_REFUSALS:
        return RefundRefused(detail, **common)
    if status in (409, 422) and code in CAPTURE_REFUSALS:
        capturable = _str_member(body, "amount_capturable")
        return CaptureRefused(detail, amount_capturable=capturable, **common)
    if status == 409 and code == NOT_VOIDABLE:
        return VoidRefused(detail, **common)
    if status == 409 and code == MODIFICATION_IN_PROGRESS:
        return ModificationInProgress(detail, **common)
    if status == 422 and code == KEY_REUSED:
        return IdempotencyKeyReused(detail, **common)
    if status == 422 and code == KEY_EXPIRED:
        return IdempotencyKeyExpired(detail, **common)
    if status in (400, 413, 415, 422):
        return ValidationError(detail, errors=_field_errors(body), **common)
    if status in (401, 403):
        return AuthenticationError(detail, **common)
    if status == 404:
        return NotFound(detail, **common)
    if status in RETRYABLE_STATUSES or (status == 409 and code == IN_PROGRESS):
        return None
    return UnexpectedResponse(f"unexpected answer HTTP {status}: {detail}", **common)


def retry_for(answer: Answer) -> Retry:
    code = _str_member(answer.body, "code")
    label = f"HTTP {answer.status}" + (f" {code}" if code else "")
    operation_id = _str_member(answer.body, "operation_id")
    if answer.status == 202:
        reason, failure = "HTTP 202: the outcome is not known yet", False
    elif answer.status == 409:
        reason, failure = f"{label}: a request with this key is being processed", False
    else:
        reason, failure = f"{label}: not processed now", True
    return Retry(
        reason=reason,
        failure=failure,
        status=answer.status,
        retry_after_s=answer.retry_after_s,
        operation_id=operation_id,
    )


def payment_decision(payment: Payment, *, key: str | None) -> Decision:
    """What a payment's status means: done, final failure, or still pending."""
    common: dict[str, Any] = {
        "payment_id": payment.payment_id,
        "operation_id": payment.operation_id,
        "idempotency_key": key,
        "body": payment.raw,
    }
    if payment.status in APPROVED_STATUSES:
        return Done(payment)
    if payment.status == "DECLINED":
        code = payment.decline_code or "declined"
        return Fail(
            PaymentDeclined(
                f"the provider declined the payment ({code})", decline_code=code, **common
            )
        )
    if payment.status == "FAILED":
        return Fail(PaymentRejected("the provider rejected the payment; nothing charged", **common))
    return Retry(
        reason=f"payment {payment.status}", failure=False, operation_id=payment.operation_id
    )


def create_decision(answer: Answer, *, key: str | None) -> Decision:
    """What an answer to `POST /payments` (or an operation's stored result) means."""
    if answer.status in (200, 201):
        if answer.body is None:
            return Fail(
                UnexpectedResponse("a success without a JSON payment", status=answer.status)
            )
        try:
            payment = parse_payment(answer.body)
        except UnexpectedResponse as exc:
            return Fail(exc)
        return payment_decision(payment, key=key)
    if answer.status == 202:
        return retry_for(answer)
    error = error_for(answer, key=key)
    return Fail(error) if error is not None else retry_for(answer)


def transport_decision(exc: httpx.TransportError) -> Retry:
    """A connection error or timeout: the request may or may not have arrived; retry it."""
    detail = str(exc) or "no detail"
    return Retry(reason=f"{type(exc).__name__}: {detail}", failure=True)


def operation_decision(operation: Operation) -> OperationDecision:
    """What an operation's current state means for a caller waiting on its outcome."""
    key = operation.idempotency_key
    if operation.is_terminal:
        result = operation.result
        if result is None or result.body is None:
            return FetchPayment(
                payment_id=operation.payment_id, operation_id=operation.operation_id
            )
        decision = create_decision(Answer(status=result.status_code, body=result.body), key=key)
        if isinstance(decision, Retry):
            # A stored result is final; if it does not say so, the payment itself will.
            return FetchPayment(
                payment_id=operation.payment_id, operation_id=operation.operation_id
            )
        return decision
    if operation.state == "FAILED_RETRYABLE":
        # Certainly not charged, and only a new POST with the same key drives it again:
        # waiting would never end, so hand it back to the caller.
        return Fail(
            OutcomeUnknown(
                "the provider did not process this payment; send it again with the same "
                "idempotency key to drive it",
                operation_id=operation.operation_id,
                payment_id=operation.payment_id,
                idempotency_key=key,
                body=operation.raw,
            )
        )
    return Retry(
        reason=f"operation {operation.state}",
        failure=False,
        status=200,
        operation_id=operation.operation_id,
    )


def read_decision(answer: Answer, *, key: str | None = None) -> Mapping[str, Any] | Fail | Retry:
    """A `GET` answer: its JSON object when 200, else what to do about it."""
    if answer.status == 200:
        if answer.body is None:
            return Fail(UnexpectedResponse("an answer without a JSON object", status=200))
        return answer.body
    error = error_for(answer, key=key)
    if error is not None:
        return Fail(error)
    # Paced like any failure, but never sooner than the API's Retry-After (a 429 or 503).
    return Retry(
        reason=f"HTTP {answer.status}: not answered now",
        failure=True,
        status=answer.status,
        retry_after_s=answer.retry_after_s,
    )


def poll_operation_decision(answer: Answer) -> tuple[OperationDecision, Operation | None]:
    """What an answer to `GET /operations/{id}` means for a caller waiting on the outcome,
    with the operation when the answer held one."""
    read = read_decision(answer)
    if isinstance(read, Fail | Retry):
        return read, None
    try:
        operation = parse_operation(read)
    except UnexpectedResponse as exc:
        return Fail(exc), None
    return operation_decision(operation), operation


def poll_payment_decision(answer: Answer, *, key: str | None) -> Decision:
    """What an answer to `GET /payments/{id}` means for a caller waiting on the outcome."""
    read = read_decision(answer, key=key)
    if isinstance(read, Fail | Retry):
        return read
    try:
        payment = parse_payment(read)
    except UnexpectedResponse as exc:
        return Fail(exc)
    return payment_decision(payment, key=key)
