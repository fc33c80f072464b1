"""Every error the client raises, and what each one tells the caller to do.

PaymentsError                  base of everything below; never an `httpx` exception
├── PaymentFailed              a definite, final answer that is not a success; retrying
│   │                          the same key replays it, so make a new payment if you want
│   ├── PaymentDeclined        402: the provider declined (`decline_code`); nothing charged
│   └── PaymentRejected        502 PROVIDER_REJECTED: refused as invalid; nothing charged
├── RequestError               the API refused the request itself; sending it again can
│   │                          never succeed, so the client does not retry it
│   ├── ValidationError        422 VALIDATION_ERROR (`errors` names the fields), a
│   │                          malformed Idempotency-Key (400), body too large (413) or
│   │                          not JSON (415)
│   ├── IdempotencyKeyReused   422: the key belongs to a different request (a caller bug)
│   ├── IdempotencyKeyExpired  422: the key is past its TTL; `operation_id` is the old one
│   ├── AuthenticationError    401/403: missing or unknown API key
│   ├── NotFound               404: no such operation, payment or refund for this API key
│   ├── RefundRefused          409 PAYMENT_NOT_REFUNDABLE / 422 REFUND_EXCEEDS_PAYMENT: the
│   │                          payment cannot be refunded by that much now; nothing was
│   │                          stored under the key, so it may be sent again later
│   ├── CaptureRefused         409 PAYMENT_NOT_CAPTURABLE / 422 CAPTURE_EXCEEDS_CAPTURABLE
│   │                          (`amount_capturable` says what is left): as RefundRefused
│   ├── VoidRefused            409 PAYMENT_NOT_VOIDABLE: as RefundRefused
│   └── ModificationInProgress 409 PAYMENT_MODIFICATION_IN_PROGRESS: another capture or void
│                              of the payment is in flight (`operation_id` is that one's);
│                              nothing was stored under this key
├── OutcomeUnknown             the client stopped before a final answer: the payment may
│   │                          or may not have been charged. Resume with the same
│   │                          `idempotency_key` (create_payment) or `operation_id`
│   │                          (wait_for_outcome); that can never charge twice
│   └── RetryBudgetExhausted   stopped early because the client's retry budget ran out
├── ApiUnavailable             a single read (get_operation, ...) got no answer now
│                              (connection error, timeout, 5xx); safe to call again
└── UnexpectedResponse         an answer this client does not understand
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One invalid field of a request, as the API names it."""

    field: str
    message: str


class PaymentsError(Exception):
    """Base class of every error this client raises."""

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str | None = None,
        body: Mapping[str, Any] | None = None,
        operation_id: str | None = None,
        payment_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        #: HTTP status of the answer this error came from, if any.
        self.status = status
        #: The problem's machine-readable `code`, if the API sent one.
        self.code = code
        #: The problem document as sent, if any.
        self.body: Mapping[str, Any] | None = body
        self.operation_id = operation_id
        self.payment_id = payment_id
        self.idempotency_key = idempotency_key


class PaymentFailed(PaymentsError):
    """A final answer other than success; a retry with the same key replays it."""


class PaymentDeclined(PaymentFailed):
    """The provider declined the payment; `decline_code` says why. Nothing was charged."""

    def __init__(self, detail: str, *, decline_code: str, **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        self.decline_code = decline_code


class PaymentRejected(PaymentFailed):
    """The provider refused the request as invalid. Nothing was charged."""


class RequestError(PaymentsError):
    """The API refused the request itself; the same request can never succeed."""


class ValidationError(RequestError):
    """The request is invalid; `errors` lists each failing field when the API named them."""

    def __init__(self, detail: str, *, errors: Sequence[FieldError] = (), **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        self.errors: tuple[FieldError, ...] = tuple(errors)


class IdempotencyKeyReused(RequestError):
    """The key was already used for a different request: a new payment needs a new key."""


class IdempotencyKeyExpired(RequestError):
    """The key is past its TTL: the API will not run it again, nor charge a second time."""


class AuthenticationError(RequestError):
    """The API key is missing, unknown or not allowed here."""


class NotFound(RequestError):
    """No such resource for this API key."""


class RefundRefused(RequestError):
    """The payment cannot be refunded (by this much) now; nothing stored, nothing sent."""


class CaptureRefused(RequestError):
    """The payment cannot be captured (by this much) now; nothing stored, nothing sent.

    `amount_capturable` is what the authorization has left, when the API said so (422
    CAPTURE_EXCEEDS_CAPTURABLE).
    """

    def __init__(self, detail: str, *, amount_capturable: str | None = None, **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        self.amount_capturable = amount_capturable


class VoidRefused(RequestError):
    """The payment has no hold left to void; nothing stored, nothing sent."""


class ModificationInProgress(RequestError):
    """Another capture or void of the payment is in flight; nothing stored, nothing sent.

    `operation_id` is the operation in flight, not one of this request: once it is final,
    read the payment to see whether this capture or void is still possible.
    """


class OutcomeUnknown(PaymentsError):
    """The client gave up before a final answer; the payment may or may not exist.

    `idempotency_key` (and `operation_id`, once the API named one) let any caller, this
    process or a restarted one, find out and finish: `create_payment(...,
    idempotency_key=key)` with the same arguments, or `wait_for_outcome(operation_id)`.
    `last_status` is the status of the last answer (None after a transport error).
    """

    def __init__(self, detail: str, *, last_status: int | None = None, **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        self.last_status = last_status


class RetryBudgetExhausted(OutcomeUnknown):
    """The client's retry budget ran out: too many failures lately, so it stopped early."""


class ApiUnavailable(PaymentsError):
    """A single read got no usable answer now (connection error, timeout, 5xx, 429); call
    again (after `Retry-After` for a 429 or 503)."""


class UnexpectedResponse(PaymentsError):
    """An answer this client does not understand (status, media type or body)."""
