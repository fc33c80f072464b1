"""What operators do to operations: read across tenants, recheck, resolve.

One implementation, behind the admin API (`app/admin/router.py`), the console
(`app/console/`) and, through the admin API, the `payments ops` commands.

Recheck and resolve act as the operation's owner, exactly as the worker does: take
ownership with a lease and a new fence (`leases.take_over`, so a live owner is never
overtaken and two operators never both act), then write only through the fenced,
audited verbs. A resolution asks the provider first and records only what it confirms:

    outcome       provider lookup by the derived key     recorded
    charged       a succeeded charge                     complete -> COMPLETED (201 stored)
    not_charged   a declined charge                      complete -> COMPLETED (402 stored)
    not_charged   no charge, last send >= a lease ago    fail -> FAILED (502 stored)
    anything else, or the provider cannot say            409, nothing written, lease released

A reason that is blank or holds a control character (NUL cannot even be stored) is refused
before anything is read: `422 VALIDATION_ERROR`, by the same rule as the reconciliation
queue's (`app/settlement/changes.py`'s `check_reason`).

For a refund's operation the same table holds with the refund in the charge's place:
"charged" says the provider made the refund, "not_charged" that it holds none; and so for a
capture's or a void's, with the capture (the void) in the charge's place. Each kind names
what the provider keeps (`record_name`), and the refusals below say that name.

Nothing here sends a charge: a resolution can only record what the provider already holds,
so it can never make a second one.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from app.admin.deliveries import DeliveryActions
from app.admin.errors import (
    NotFlagged,
    OperationBusy,
    OperationFinal,
    ProviderDisagrees,
    ProviderLookupFailed,
    SendTooRecent,
)
from app.admin.rows import Operator
from app.db.database import Database
from app.errors import NotFound, ProblemError
from app.operations import leases, reads
from app.operations import operator_reads as operation_reads
from app.operations.kinds import Described
from app.operations.outcomes import FencedOut, Outcome
from app.operations.states import TERMINAL, State
from app.operations.values import OwnedRef, Snapshot
from app.provider.errors import ProviderError
from app.recovery.reconcile import Reconciler
from app.settlement.changes import check_reason
from app.webhooks.operator_reads import EventDeliveries

logger = logging.getLogger("payments.operators")


class Resolution(StrEnum):
    """What an operator says happened at the provider: the operation took effect (a charge,
    a refund, a capture, a void) or it took none. The values are the API's (`charged`,
    `not_charged`), for every kind."""

    TOOK_EFFECT = "charged"
    NO_EFFECT = "not_charged"


@dataclass(frozen=True)
class ProviderView:
    """A live lookup at the provider: its record under the key, or why it could not say."""

    reachable: bool
    # What the provider keeps for this kind of operation ("charge", "refund", "capture" ...).
    record_name: str
    record: dict[str, Any] | None = None
    error: str | None = None


@dataclass(frozen=True)
class Detail:
    """An operation with its history, its business object and the provider's view of it."""

    snapshot: Snapshot
    subject: Described | None
    provider: ProviderView | None
    # Its events (oldest first), each with its webhook deliveries.
    events: tuple[EventDeliveries, ...] = ()


class OperatorActions:
    """Reads, rechecks and resolutions, as the operation's owner where it writes."""

    def __init__(
        self,
        *,
        db: Database,
        reconcilers: Mapping[str, Reconciler[Any, Any]],
        lease_s: float,
        key_ttl_s: int,
    ) -> None:
        self._db = db
        # By operation name: each kind's reconciler, its driver and its kind.
        self._reconcilers = reconcilers
        # Each kind's part of the search, in the order their branches join its statement.
        self.search_records = tuple(r.driver.kind.search for r in reconcilers.values())
        self._lease_s = lease_s
        self._key_ttl_s = key_ttl_s
        self.deliveries = DeliveryActions(db=db)

    async def list(
        self, flt: operation_reads.OperationFilter, *, limit: int
    ) -> operation_reads.Page:
        async with self._db.connection() as conn:
            return await operation_reads.list_operations(
                conn, flt, limit=limit, key_ttl_s=self._key_ttl_s
            )

    async def overview(self) -> operation_reads.Overview:
        async with self._db.connection() as conn:
            return await operation_reads.overview(conn)

    async def read(self, operation_id: uuid.UUID) -> Snapshot:
        """The operation with its history; `NotFound` if there is none."""
        async with self._db.connection() as conn:
            snapshot = await reads.get_snapshot(
                conn, operation_id, key_ttl_s=self._key_ttl_s, with_history=True
            )
        if snapshot is None:
            raise NotFound("no such operation")
        return snapshot

    async def detail(self, operation_id: uuid.UUID) -> Detail:
        """The operation, its business object, a live lookup at the provider, its events
        and their webhook deliveries.

        The provider being down is part of the answer (`reachable: false`), never an error.
        """
        snapshot = await self.read(operation_id)
        events = await self.deliveries.for_operation(
            tenant_id=snapshot.operation.tenant_id, operation_id=operation_id
        )
        return replace(await self._detail(snapshot), events=tuple(events))

    async def _detail(self, snapshot: Snapshot) -> Detail:
        operation_id = snapshot.operation.id
        reconciler = self._reconcilers.get(snapshot.operation.operation_name)
        if reconciler is None:
            return Detail(snapshot, None, None)
        kind = reconciler.driver.kind
        async with self._db.connection() as conn:
            described = await kind.describe(conn, operation_id, snapshot.operation.created_at)
        if described is None:
            return Detail(snapshot, None, None)
        name = kind.record_name
        try:
            found = await kind.look_up(described.row)
        except ProviderError as exc:
            view = ProviderView(reachable=False, record_name=name, error=str(exc))
            return Detail(snapshot, described, view)
        record = None if found is None else kind.show(found)
        return Detail(snapshot, described, ProviderView(True, name, record))

    async def recheck(
        self, operation_id: uuid.UUID, operator: Operator
    ) -> tuple[Outcome, Snapshot]:
        """Reconcile now, as the worker would: look up, then record or resend."""
        snapshot = await self.read(operation_id)
        self._refuse_final(snapshot)
        reconciler = self._reconciler(snapshot)
        if snapshot.state is State.FAILED_RETRYABLE:
            name = reconciler.driver.kind.record_name
            raise OperationBusy(
                f"certainly no {name} was made: it waits for the client's retry with the same key",
                operation_id=operation_id,
            )
        ref = await self._take(snapshot, operator)
        outcome = await reconciler.reconcile(ref, actor=operator.actor)
        return outcome, await self.read(operation_id)

    async def resolve(
        self, operation_id: uuid.UUID, resolution: Resolution, reason: str, operator: Operator
    ) -> Snapshot:
        """Record the outcome the operator states, if the provider confirms it; else 409."""
        fields = {
            "operation_id": str(operation_id),
            "operator": operator.name,
            "outcome": resolution.value,
        }
        try:
            snapshot = await self._resolve(operation_id, resolution, reason, operator)
        except ProblemError as exc:
            logger.warning(
                "operator resolution refused", extra={"fields": {**fields, "code": exc.code}}
            )
            raise
        logger.warning("operation resolved by an operator", extra={"fields": fields})
        return snapshot

    async def _resolve(
        self, operation_id: uuid.UUID, resolution: Resolution, reason: str, operator: Operator
    ) -> Snapshot:
        # The reason goes in the history: the reconciliation queue's rule for an operator's
        # reason (no NUL, no control characters but tabs and line breaks), checked first.
        reason = check_reason(reason)
        snapshot = await self.read(operation_id)
        self._refuse_final(snapshot)
        if not snapshot.operation.needs_attention:
            raise NotFlagged(
                "only an operation that needs attention can be resolved; recheck it instead",
                operation_id=operation_id,
            )
        driver = self._reconciler(snapshot).driver
        kind = driver.kind
        ref = await self._take(snapshot, operator)
        written = False
        try:
            # Measured before the lookup: only a lookup made once every call has ended may be
            # believed when it finds nothing.
            wait_s = await self._call_may_be_in_flight(ref)
            try:
                subject, record = await driver.lookup(ref)
            except ProviderError as exc:
                raise ProviderLookupFailed(
                    f"the provider could not be asked ({exc}); nothing was changed",
                    operation_id=operation_id,
                ) from None
            how = f"resolved by {operator.actor} as {resolution.value}: {reason}"
            outcome: Outcome
            if record is not None and (resolution is Resolution.TOOK_EFFECT) == (
                kind.took_effect(record)
            ):
                outcome = await driver.record_found(
                    ref, subject, record, actor=operator.actor, how=f"{how}; provider lookup"
                )
            elif record is None and resolution is Resolution.NO_EFFECT:
                if wait_s is not None:
                    raise SendTooRecent(
                        f"the provider was called less than a lease ago and may still make the"
                        f" {kind.record_name}; try again in {wait_s} s",
                        operation_id=ref.id,
                        headers={"retry-after": str(wait_s)},
                    )
                outcome = await driver.record_no_effect(
                    ref,
                    subject,
                    actor=operator.actor,
                    reason=f"{how}; provider lookup: no {kind.record_name}",
                )
            else:
                name = kind.record_name
                status = None if record is None else kind.show(record)["status"]
                held = f"no {name}" if status is None else f"a {status} {name}"
                raise ProviderDisagrees(
                    f"the provider holds {held} under this operation's key; nothing was changed",
                    operation_id=operation_id,
                )
            if isinstance(outcome, FencedOut):
                raise OperationBusy("another owner took the operation over; read it again")
            written = True
        finally:
            if not written:
                async with self._db.connection() as conn:
                    await leases.release(conn, ref, owner=operator.actor)
        return await self.read(operation_id)

    async def _call_may_be_in_flight(self, ref: OwnedRef) -> int | None:
        """Seconds to wait until no request for the operation can still be on its way.

        A live owner's provider call never outlasts its lease (the lease is longer than the
        provider timeout), so a lookup made a lease after the last send sees every charge
        the operation can ever have. None when that is already so.
        """
        async with self._db.connection() as conn:
            since = await operation_reads.seconds_since_last_send(conn, ref)
        if since is None or since >= self._lease_s:
            return None
        return int(self._lease_s - since) + 1

    async def _take(self, snapshot: Snapshot, operator: Operator) -> OwnedRef:
        async with self._db.connection() as conn:
            ref = await leases.take_over(
                conn, snapshot, owner=operator.actor, lease_s=self._lease_s
            )
        if ref is None:
            raise OperationBusy(
                "another owner holds the operation (or it just changed); try again shortly",
                operation_id=snapshot.operation.id,
                headers={"retry-after": "1"},
            )
        return ref

    def _reconciler(self, snapshot: Snapshot) -> Reconciler[Any, Any]:
        reconciler = self._reconcilers.get(snapshot.operation.operation_name)
        if reconciler is None:
            raise OperationBusy(
                f"operations of kind {snapshot.operation.operation_name!r} cannot be acted on here",
                operation_id=snapshot.operation.id,
            )
        return reconciler

    @staticmethod
    def _refuse_final(snapshot: Snapshot) -> None:
        if snapshot.state in TERMINAL:
            raise OperationFinal(
                f"the operation is {snapshot.state.value}; its outcome is recorded",
                operation_id=snapshot.operation.id,
            )
