"""What driving or reconciling an operation came to, as typed values.

The charge driver and the reconciler return one of these, never an HTTP reply; the API
renders them at its edge (`app/idempotency/replies.py`), the worker and the metrics count them.

    Succeeded   COMPLETED: the provider approved; the stored answer is the 201
    Declined    COMPLETED: the provider declined (definite); the stored answer is the 402
    Rejected    FAILED: the provider refused the request as invalid, nothing charged (502)
    NotSent     FAILED_RETRYABLE: certainly not processed; retry with the same key (503)
    Unknown     UNKNOWN_REQUIRES_RECOVERY: no definite answer yet; checked again later (202)
    FencedOut   a newer owner holds the operation; this owner wrote nothing
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from app.operations.values import OwnedRef, StoredResponse


@dataclass(frozen=True)
class Succeeded:
    operation_id: uuid.UUID
    stored: StoredResponse


@dataclass(frozen=True)
class Declined:
    operation_id: uuid.UUID
    decline_code: str
    stored: StoredResponse


@dataclass(frozen=True)
class Rejected:
    operation_id: uuid.UUID
    detail: str
    stored: StoredResponse


@dataclass(frozen=True)
class NotSent:
    operation_id: uuid.UUID
    retry_after_s: int
    # What the operation creates, and the ids its problem shows: its kind's `noun` and
    # `links` (`app/operations/kinds.py`).
    noun: str
    links: Mapping[str, str]


@dataclass(frozen=True)
class Unknown:
    operation_id: uuid.UUID
    attempts: int
    next_check_in_s: float
    needs_attention: bool


@dataclass(frozen=True)
class FencedOut:
    operation_id: uuid.UUID
    fence: int


Final = Succeeded | Declined | Rejected
Outcome = Succeeded | Declined | Rejected | NotSent | Unknown | FencedOut

# What a reconciled operation became, as the metrics count it.
_RECONCILED_AS: dict[type[Outcome], str] = {
    Succeeded: "completed",
    Declined: "completed",
    Rejected: "failed",
    NotSent: "unknown",
    Unknown: "unknown",
    FencedOut: "fenced_out",
}


def reconciled_as(outcome: Outcome) -> str:
    """The `payments_reconciliations` label of a reconciliation that came to `outcome`."""
    return _RECONCILED_AS[type(outcome)]


@dataclass(frozen=True)
class Indefinite:
    """A send that got no definite answer; the caller decides what it means and records it.

    `ref` is the owner's reference after `PROVIDER_REQUEST_SENT` was committed. `not_sent`
    says the provider certainly did not process the request (a first attempt may then be
    retried by the client; a recovery resend may not conclude anything from it).
    """

    ref: OwnedRef
    reason: str
    not_sent: bool
    retry_after_s: float | None = None
    # Not even tried: the circuit breaker held it back (`retry_after_s` is its cool-down).
    circuit_open: bool = False
    # The ids a problem about the operation shows (its kind's `links`), when not sent: a
    # client's own send that was not processed is answered 503 with them.
    links: Mapping[str, str] | None = None
