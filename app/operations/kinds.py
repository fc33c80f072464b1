"""An operation kind: what one kind of operation (a payment, a refund) hands the shared code.

Each kind defines one `OperationKind` in its own package (`app/payments/kind.py`,
`app/refunds/kind.py`); the composition root (`app/composition.py`) registers them in
`KINDS` and builds each one's driver, reconciler and operators' view in one loop. The keyed
flow (`app/idempotency/flow.py`), its replies and the typed outcomes take what they say of
the business object from the kind, so none of them names a payment or a refund.

    name          the operation name its rows carry (`create_payment`)
    noun          what a client creates with it ("payment"), as problems name it
    links         the ids a problem about one of its operations shows (`payment_id` ...)
    build_driver  its `OperationDriver` (provider request, lookup, loaders, stored replies
                  and events), from the parts every driver is built with (`DriverParts`)
    record_name, find_at_provider, took_effect, show, describe
                  what operators see of it: the provider's record under the derived keys,
                  what that record means, and the business object itself
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from app.db.database import Connection, Database
from app.failpoints import Failpoints
from app.operations.values import OperationRow
from app.provider.registry import Providers
from app.provider.routing import RoutingTable

DriverT = TypeVar("DriverT")


@dataclass(frozen=True)
class DriverParts:
    """What the composition root hands every kind to build its driver with."""

    db: Database
    providers: Providers
    routing: RoutingTable
    lease_s: float
    failpoints: Failpoints
    # Called once per failover with (from provider, to provider, cause).
    on_failover: Callable[[str, str, str], None] | None = None


@dataclass(frozen=True)
class Described:
    """The business object as operators see it, and its row (what the provider lookup
    reads its providers and keys from)."""

    kind: str
    body: dict[str, Any]
    row: Any


@dataclass(frozen=True)
class OperationKind(Generic[DriverT]):
    """One kind of operation, as everything generic sees it."""

    name: str
    noun: str
    # The ids a problem about one of its operations shows, from the operation's row.
    links: Callable[[OperationRow], dict[str, str]]
    build_driver: Callable[[DriverParts], DriverT]
    # What the provider keeps: "charge" or "refund", the key of its record in the views.
    record_name: str
    # The provider's record of a business object (its row), if it holds one.
    find_at_provider: Callable[[Providers, Any], Awaitable[Any | None]]
    # Whether a record the provider holds means the operation took effect (a succeeded
    # charge, any refund): what "charged" asserts and "not_charged" denies.
    took_effect: Callable[[Any], bool]
    # The provider's record as the admin views show it.
    show: Callable[[Any], dict[str, Any]]
    # The business object of an operation, None if it cannot be read.
    describe: Callable[[Connection, uuid.UUID], Awaitable[Described | None]]
