"""What can go wrong when we talk to the payment provider.

The provider client translates every transport error and unexpected answer into one of these,
so no error of the wire client crosses the adapter boundary. The tree decides what the caller
does next: a definite answer may be recorded as final or retried with the same key, an
indefinite one must be reconciled by looking the charge up, never guessed.

    ProviderError
    ├── RequestNotSent   definite: the provider certainly did not process the request (a
    │   │                charge or a refund: could not connect, or the deadline fired,
    │   │                before any byte of the request was written on any attempt; or a
    │   │                429/503 the provider documents as "not processed").
    │   │                Safe to send again later with the same key. Carries `retry_after`.
    │   └── CircuitOpen  not even tried: the circuit breaker is open (`breaker.py`);
    │                    `retry_after` is the rest of its cool-down.
    ├── RequestRejected  definite: the provider refused the request as invalid (400);
    │   │                nothing was charged or refunded, and sending it again would not help.
    │   └── Unauthorized the provider refused our credentials (401: the key for it missing,
    │                    wrong or revoked) before reading the request: nothing was charged
    │                    or refunded. Failed, never failed over: it is our configuration
    │                    that is wrong, which sending the payment elsewhere would hide.
    ├── OutcomeUnknown   indefinite: the request was or may have been sent and no definite
    │                    answer came back (the deadline fired once it may have been
    │                    written, a write or read error, the connection lost mid-request,
    │                    a malformed answer, any other 5xx, 409, an unexpected status, an
    │                    unparseable body). The charge may exist: look it up.
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

    def __init__(self, detail: str, *, unhealthy: bool = True) -> None:
        super().__init__(detail)
        self.detail = detail
        #: The provider failed to answer (timeout, no connection, 5xx), as the circuit
        #: breaker counts failures; False when it answered, even with an error.
        self.unhealthy = unhealthy


class RequestNotSent(ProviderError):
    """The provider certainly did not process the request; it may be sent again later."""

    outcome: ClassVar[str] = "not_sent"

    def __init__(
        self, detail: str, *, retry_after: float | None = None, unhealthy: bool = True
    ) -> None:
        super().__init__(detail, unhealthy=unhealthy)
        #: Seconds the provider asked us to wait, when it said so.
        self.retry_after = retry_after


class CircuitOpen(RequestNotSent):
    """Not sent at all: the circuit breaker is open; `retry_after` is its cool-down left."""

    outcome: ClassVar[str] = "circuit_open"


class RequestRejected(ProviderError):
    """The provider refused the request as invalid; nothing was charged or refunded."""

    outcome: ClassVar[str] = "rejected"


class Unauthorized(RequestRejected):
    """The provider refused our credentials (401); nothing was charged or refunded."""

    outcome: ClassVar[str] = "unauthorized"


class OutcomeUnknown(ProviderError):
    """The charge may or may not exist at the provider; only a lookup can tell."""

    outcome: ClassVar[str] = "unknown"


class LookupFailed(ProviderError):
    """A lookup by key gave no usable answer; nothing can be concluded from it."""

    outcome: ClassVar[str] = "failed"
