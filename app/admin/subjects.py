"""What operators need from the code that owns an operation's business object.

One `Subject` per operation name (`create_payment` -> the payment; a refund's operation
adds its own), handed in by the composition root, so `app/admin/` names no business table.

    describe      the business object's representation, for the admin read and the console
    driver        looks the provider's record up by the derived key, and records an outcome
                  through the same verbs (and the same rendering) as the normal flow
    reconciler    what the worker runs, for a recheck
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.operations.outcomes import FencedOut, Final, Outcome, Rejected
from app.operations.refs import OwnedRef
from app.provider.client import Charge


class ResolvingDriver(Protocol):
    """The driver's verbs a resolution uses (`ChargeDriver` has them)."""

    async def lookup(self, ref: OwnedRef, /) -> tuple[Any, Charge | None]: ...

    async def record_charge(
        self, ref: OwnedRef, subject: Any, charge: Charge, /, *, actor: str, how: str
    ) -> Final | FencedOut: ...

    async def record_not_charged(
        self, ref: OwnedRef, subject: Any, /, *, actor: str, reason: str
    ) -> Rejected | FencedOut: ...


class Rechecker(Protocol):
    """Reconciling one owned operation (`Reconciler` does it)."""

    async def reconcile(self, ref: OwnedRef, *, actor: str) -> Outcome: ...


@dataclass(frozen=True)
class Described:
    """The business object as operators see it, and the key the provider knows it by."""

    kind: str
    body: dict[str, Any]
    provider_key: str


@dataclass(frozen=True)
class Subject:
    """Everything operators can do with one operation name's business object."""

    describe: Callable[[uuid.UUID], Awaitable[Described | None]]
    find_at_provider: Callable[[str], Awaitable[Charge | None]]
    driver: ResolvingDriver
    reconciler: Rechecker
