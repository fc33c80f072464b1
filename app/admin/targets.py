"""What operators act on: the business object of each operation name, as a `Subject`.

One `Subject` per operation name, built by the composition root from each registered
operation kind (`app/operations/kinds.py`) with its driver and reconciler, so `app/admin/`
names no business table.

    describe      the business object's representation, for the admin read and the console
    find_at_provider, record_name, took_effect, show
                  the provider's record under the derived key, and what it means
    driver        looks the provider's record up by the derived key, and records an outcome
                  through the same verbs (and the same rendering) as the normal flow
    reconciler    what the worker runs, for a recheck
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.operations.kinds import Described
from app.operations.outcomes import FencedOut, Final, Outcome, Rejected
from app.operations.values import OwnedRef


class ResolvingDriver(Protocol):
    """The driver's verbs a resolution uses (`ChargeDriver` and `RefundDriver` have them).

    `found` is what the provider holds under the operation's key (a charge, a refund).
    """

    async def lookup(self, ref: OwnedRef, /) -> tuple[Any, Any | None]: ...

    async def record_found(
        self, ref: OwnedRef, subject: Any, found: Any, /, *, actor: str, how: str
    ) -> Final | FencedOut: ...

    async def record_not_charged(
        self, ref: OwnedRef, subject: Any, /, *, actor: str, reason: str
    ) -> Rejected | FencedOut: ...


class Rechecker(Protocol):
    """Reconciling one owned operation (`Reconciler` does it)."""

    async def reconcile(self, ref: OwnedRef, *, actor: str) -> Outcome: ...


@dataclass(frozen=True)
class Subject:
    """Everything operators can do with one operation name's business object."""

    describe: Callable[[uuid.UUID], Awaitable[Described | None]]
    find_at_provider: Callable[[str], Awaitable[Any | None]]
    driver: ResolvingDriver
    reconciler: Rechecker
    # What the provider keeps: "charge" or "refund", the key of its record in the views.
    record_name: str
    # Whether a record the provider holds means the operation took effect (a succeeded
    # charge, any refund): what "charged" asserts and "not_charged" denies.
    took_effect: Callable[[Any], bool]
    # The provider's record as the admin views show it.
    show: Callable[[Any], dict[str, Any]]
