"""Python client of the payments API: correct retries are the default.

- One idempotency key per logical payment or refund (a UUIDv7 unless you pass one), handed to your
  `on_key` callback before the first attempt so you can store it, and sent on every retry.
- Retries only what is safe: connection errors and timeouts, `409` in progress, `503` and
  other transient `5xx`, and `202` (outcome unknown: asked again with the same key until the
  API has settled it), honouring `Retry-After`, with capped exponential backoff and full
  jitter, an overall deadline and a retry budget.
- Never retries a final answer or a request that cannot succeed: see `client.errors`.

Only `httpx` is needed. `PaymentsClient` blocks; `AsyncPaymentsClient` is the asyncio twin.
"""

from client.aio import AsyncPaymentsClient
from client.backoff import Backoff, RetryBudget, full_jitter, parse_retry_after
from client.errors import (
    ApiUnavailable,
    AuthenticationError,
    FieldError,
    IdempotencyKeyExpired,
    IdempotencyKeyReused,
    NotFound,
    OutcomeUnknown,
    PaymentDeclined,
    PaymentFailed,
    PaymentRejected,
    PaymentsError,
    RefundRefused,
    RequestError,
    RetryBudgetExhausted,
    UnexpectedResponse,
    ValidationError,
)
from client.keys import new_idempotency_key, uuid7
from client.models import Operation, OperationResult, Payment, Refund, Transition
from client.retrying import RetryEvent
from client.sync import PaymentsClient
from client.webhooks import WebhookVerificationError, verify_webhook

__all__ = [
    "ApiUnavailable",
    "AsyncPaymentsClient",
    "AuthenticationError",
    "Backoff",
    "FieldError",
    "IdempotencyKeyExpired",
    "IdempotencyKeyReused",
    "NotFound",
    "Operation",
    "OperationResult",
    "OutcomeUnknown",
    "Payment",
    "PaymentDeclined",
    "PaymentFailed",
    "PaymentRejected",
    "PaymentsClient",
    "PaymentsError",
    "Refund",
    "RefundRefused",
    "RequestError",
    "RetryBudget",
    "RetryBudgetExhausted",
    "RetryEvent",
    "Transition",
    "UnexpectedResponse",
    "ValidationError",
    "WebhookVerificationError",
    "full_jitter",
    "new_idempotency_key",
    "parse_retry_after",
    "uuid7",
    "verify_webhook",
]
