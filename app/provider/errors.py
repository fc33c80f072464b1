"""What can go wrong when we talk to the payment provider.

The provider client translates every transport error and unexpected answer into one of these,
so no `httpx` exception crosses the adapter boundary. The tree decides what the caller does
next: a definite answer may be recorded as final or retried with the same key, an indefinite
one must be reconciled by looking the charge up, never guessed.

    ProviderError
    ├── ChargeNotSent    definite: the provider certainly did not process the charge
    │                    (connection refused, connect or pool timeout before any byte was
    │                    sent, or a 429/503 the provider documents as "not processed").
    │                    Safe to send again later with the same key. Carries `retry_after`.
    ├── ChargeRejected   definite: the provider refused the request as invalid (400);
    │                    nothing was charged and sending it again would not help.
    ├── OutcomeUnknown   indefinite: the request was or may have been sent and no definite
    │                    answer came back (read or write timeout, write error, connection
    │                    lost mid-request, protocol error, any other 5xx, 409, an unexpected
    │                    status, an unparseable body). The charge may exist: look it up.
    └── LookupFailed     a lookup by key could not tell whether the charge exists (any
                         transport error, 5xx, unexpected answer). Nothing can be concluded.

A declined charge is not an error: it is a definite answer, returned as a `Charge`.
"""

from __future__ import annotations

from typing import ClassVar


class ProviderError(Exception):
    """Base of every error the provider client raises."""

    #: Low-cardinality label for metrics and logs.
    outcome: ClassVar[str] = "error"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class ChargeNotSent(ProviderError):
    """The provider certainly did not process the charge; it may be sent again later."""

    outcome: ClassVar[str] = "not_sent"

    def __init__(self, detail: str, *, retry_after: float | None = None) -> None:
        super().__init__(detail)
        #: Seconds the provider asked us to wait, when it said so.
        self.retry_after = retry_after


class ChargeRejected(ProviderError):
    """The provider refused the request as invalid; nothing was charged."""

    outcome: ClassVar[str] = "rejected"


class OutcomeUnknown(ProviderError):
    """The charge may or may not exist at the provider; only a lookup can tell."""

    outcome: ClassVar[str] = "unknown"


class LookupFailed(ProviderError):
    """A lookup by key gave no usable answer; nothing can be concluded from it."""

    outcome: ClassVar[str] = "failed"
