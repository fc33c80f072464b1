"""Python client of the payments API: correct retries are the default.

- One idempotency key per logical payment, refund, capture or void (a UUIDv7 unless you pass
  one), handed to your `on_key` callback before the first attempt so you can store it, and sent
  on every retry.
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
    CaptureRefused,
    FieldError,
    IdempotencyKeyExpired,
    IdempotencyKeyReused,
    ModificationInProgress,
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
    VoidRefused,
)
from client.keys import new_idempotency_key, uuid7
from client.models import (
    Capture,
    Operation,
    OperationResult,
    Payment,
    Refund,
    Transition,
    Void,
)
from client.retrying import RetryEvent
from client.sync import PaymentsClient
from client.webhooks import WebhookVerificationError, verify_webhook
from client.wire import CaptureMode

__all__ = [
    "ApiUnavailable",
    "AsyncPaymentsClient",
    "AuthenticationError",
    "Backoff",
    "Capture",
    "CaptureMode",
    "CaptureRefused",
    "FieldError",
    "IdempotencyKeyExpired",
    "IdempotencyKeyReused",
    "ModificationInProgress",
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
    "Void",
    "VoidRefused",
    "WebhookVerificationError",
    "full_jitter",
    "new_idempotency_key",
    "parse_retry_after",
    "uuid7",
    "verify_webhook",
]
