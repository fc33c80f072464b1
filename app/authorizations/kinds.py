"""The capture and the void as operation kinds: `capture_payment` and `void_payment`,
registered in `app/composition.py`.

Everything a capture's or void's operation is, in two small classes on one base (the
interface is `OperationKind`, `app/operations/kinds.py`). The claim may refuse: its one
statement first locks the payment (`repository.py` says why) and checks that the
authorization may be captured (or voided) now, by this much, with nothing else in flight
(the claim's guard, `Guarded`), then writes the operation and the capture or void only if
it may; a refused claim writes nothing, so nothing is stored under the key and nothing is
sent, and the kind says why from the payment as the guard read it. Its request is the
provider's capture or void of the authorization (`provider.py`), under the modification's
own derived key; its outcome is written with the modification's status and, once it
succeeded, the payment's captured amount and status, and a payment event
(`payment.captured`, `payment.voided`, or `payment.capture_failed` / `payment.void_failed`
when the provider refused).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

from app.authorizations import provider, replies, search
from app.authorizations import repository as modifications
from app.authorizations.errors import (
    CaptureExceedsCapturable,
    ModificationInProgress,
    PaymentNotCapturable,
    PaymentNotVoidable,
)
from app.authorizations.expiry import HoldExpiry
from app.authorizations.provider import ProviderModification
from app.authorizations.repository import EXPONENTS, LockedPayment
from app.authorizations.rows import ModificationRow, ModificationStatus, ModificationType
from app.authorizations.schemas import CaptureCommand, VoidCommand
from app.authorizations.views import modification_json
from app.clock import utcnow
from app.db.database import Connection, Database
from app.db.fragments import Searchable
from app.errors import NotFound, ProblemError, ValidationFailed
from app.events.outbox import outcome_event
from app.events.rows import EventType
from app.ids import new_id
from app.operations.kinds import (
    ClaimKey,
    Guarded,
    KindParts,
    OperationKind,
    Recording,
    Upkeep,
)
from app.operations.outcomes import Rejected, Succeeded
from app.operations.states import Trigger
from app.operations.values import EventWrite, OperationName
from app.payments.money import CURRENCY_EXPONENTS, format_minor_units
from app.payments.rows import PaymentRow
from app.payments.schemas import AmountError
from app.payments.status import CAPTURABLE, PaymentStatus
from app.payments.views import payment_json
from app.provider.registry import Providers

CommandT = TypeVar("CommandT", CaptureCommand, VoidCommand)


@dataclass(frozen=True)
class Modification:
    """A capture or void, and its payment as it stood when the modification was read (with
    the modification in flight, nothing else changes the payment's amounts)."""

    row: ModificationRow
    payment: PaymentRow


class ModificationKind(
    OperationKind[CommandT, Modification, ProviderModification], Generic[CommandT]
):
    """What a capture and a void share: the claim's lock and checks, the provider's calls,
    the outcome's writes. Each subclass says what it asks for and what it leaves."""

    type: ClassVar[ModificationType]
    succeeded_event: ClassVar[EventType]
    failed_event: ClassVar[EventType]

    def __init__(self, *, providers: Providers):
        # A capture or void goes to the provider holding the authorization, and only there.
        self._providers = providers

    # The claim.

    async def prepare(
        self, conn: Connection, key: ClaimKey, command: CommandT
    ) -> Guarded[Modification]:
        """The claim's guard (the payment locked and checked in the claim's statement,
        `repository.py` says why), the capture or void it writes, and what a refusal says."""
        modification_id = new_id(utcnow())
        provider_key = f"{self.type.value}-{modification_id}"
        guard = modifications.claim_guard(
            tenant_id=key.tenant_id,
            payment_id=command.payment_id,
            capture=self.type is ModificationType.CAPTURE,
            amounts=self._amounts(command),
        )

        def claimed(row: tuple[Any, ...], at: datetime) -> Modification:
            locked = modifications.locked_payment(row)
            payment = locked.payment
            assert payment.provider_charge_id is not None, "an authorization has its charge"
            assert locked.amount_minor is not None, "a claimed capture's amount fits"
            made = ModificationRow(
                id=modification_id,
                tenant_id=key.tenant_id,
                payment_id=payment.id,
                operation_id=key.operation_id,
                type=self.type.value,
                provider_key=provider_key,
                charge_id=str(payment.provider_charge_id),
                provider=payment.provider,
                status=ModificationStatus.PENDING.value,
                amount_minor=locked.amount_minor,
                currency=payment.currency,
                provider_reference=None,
                created_at=at,
                updated_at=at,
            )
            return Modification(made, payment)

        def refusal(row: tuple[Any, ...] | None) -> ProblemError:
            if row is None:
                raise NotFound("no such payment")
            locked = modifications.locked_payment(row)
            self._validate(command, locked.payment)
            refused = self._refusal(locked, command)
            # The guard's SQL and these checks say the same: one refuses what the other does.
            assert refused is not None, f"the claim's guard refused what the kind takes: {row}"
            return refused

        return Guarded(
            write=modifications.created_with_claim(
                id=modification_id,
                type=self.type,
                provider_key=provider_key,
                payment_id=command.payment_id,
            ),
            guard=guard,
            claimed=claimed,
            refusal=refusal,
        )

    def _amounts(self, command: CommandT) -> dict[int, int | None] | None:
        """What the request takes in minor units, by currency exponent (None: one it does
        not fit); None: all that is capturable."""
        return None

    def _validate(self, command: CommandT, payment: PaymentRow) -> None:
        """Raise what is wrong with the request itself, given its payment (its currency)."""

    def _refusal(self, locked: LockedPayment, command: CommandT) -> ProblemError | None:
        """Why this capture or void may not be made now, if it may not."""
        if locked.in_flight is not None:
            return ModificationInProgress(
                "another capture or void of this payment is in flight; retry it with its own "
                "key, or this one once it is final",
                operation_id=locked.in_flight,
            )
        return None

    def links(self, subject: Modification) -> dict[str, str]:
        row = subject.row
        return {"payment_id": str(row.payment_id), f"{row.type}_id": str(row.id)}

    # The provider.

    async def request(self, subject: Modification) -> ProviderModification:
        return await provider.send(self._providers, subject.row)

    async def look_up(self, subject: Modification) -> ProviderModification | None:
        return await provider.find(self._providers, subject.row)

    # What to record.

    def found(
        self,
        subject: Modification,
        found: ProviderModification,
        *,
        operation_id: uuid.UUID,
        how: str,
    ) -> Recording:
        """The provider made it: COMPLETED, the modification SUCCEEDED, the payment's
        captured amount and status moved, the answer and the payment's event, in one
        statement."""
        row, at = subject.row, utcnow()
        status, captured = self._leaves(subject.payment, row)
        # The answer and the event show the capture or void alike: built once for both.
        made = replies.made(row, found, at=at)
        stored = replies.stored_made(row, made)
        data = payment_json(
            subject.payment, status=status.value, amount_captured_minor=captured, updated_at=at
        )
        return Recording(
            trigger=Trigger.COMPLETE,
            reason=f"{how}: {row.type} {found.reference}",
            stored=stored,
            write=modifications.result_with_outcome(
                row,
                payment_created_at=subject.payment.created_at,
                status=ModificationStatus.SUCCEEDED,
                provider_reference=found.reference,
                at=at,
            ),
            event=self._event(subject, self.succeeded_event, data, made),
            outcome=Succeeded(operation_id, stored),
        )

    def _leaves(self, payment: PaymentRow, row: ModificationRow) -> tuple[PaymentStatus, int]:
        """The payment's status and captured amount once `row` succeeded."""
        raise NotImplementedError

    def rejected(self, subject: Modification, detail: str, *, operation_id: uuid.UUID) -> Recording:
        """The provider refused it, nothing captured or released: FAILED."""
        reason = f"provider rejected the request: {detail}"
        return self._failed(subject, detail, operation_id=operation_id, reason=reason)

    def no_effect(
        self, subject: Modification, *, operation_id: uuid.UUID, reason: str
    ) -> Recording:
        """Not made, as an operator resolved it after a lookup that found nothing: FAILED."""
        detail = f"an operator resolved it as not made; the provider holds no {self.type}"
        return self._failed(subject, detail, operation_id=operation_id, reason=reason)

    def _failed(
        self, subject: Modification, detail: str, *, operation_id: uuid.UUID, reason: str
    ) -> Recording:
        row, at = subject.row, utcnow()
        stored = replies.rejected(row, detail, operation_id=operation_id)
        return Recording(
            trigger=Trigger.FAIL,
            reason=reason,
            stored=stored,
            write=modifications.result_with_outcome(
                row,
                payment_created_at=subject.payment.created_at,
                status=ModificationStatus.FAILED,
                provider_reference=None,
                at=at,
            ),
            event=self._event(
                subject,
                self.failed_event,
                payment_json(subject.payment),
                modification_json(row, status=ModificationStatus.FAILED.value, updated_at=at),
            ),
            outcome=Rejected(operation_id, detail, stored),
        )

    def _event(
        self,
        subject: Modification,
        type: EventType,
        payment: dict[str, Any],
        modification: dict[str, Any],
    ) -> EventWrite:
        """A payment event about this capture or void: the payment as it leaves it, and the
        capture or void (under `capture` or `void`)."""
        row = subject.row
        return outcome_event(
            tenant_id=row.tenant_id, type=type, data=payment | {row.type: modification}
        )

    def attention_event(self, subject: Modification) -> EventWrite:
        """payment.needs_attention, with the payment and the capture or void in question."""
        return self._event(
            subject,
            EventType.PAYMENT_NEEDS_ATTENTION,
            payment_json(subject.payment),
            modification_json(subject.row),
        )

    # Reading.

    # `payment_modifications` is not partitioned: read by its unique `operation_id` alone,
    # its payment by the payment's id (within the window that id tells).

    async def load(
        self, conn: Connection, operation_id: uuid.UUID, created_at: datetime
    ) -> Modification:
        row = await modifications.get_for_operation(conn, operation_id)
        payments = await modifications.payments_of(conn, [row])
        if row.payment_id not in payments:
            raise LookupError(f"capture or void {row.id} has no payment")
        return Modification(row, payments[row.payment_id])

    async def load_many(
        self, conn: Connection, operations: Mapping[uuid.UUID, datetime]
    ) -> dict[uuid.UUID, Modification]:
        rows = await modifications.get_for_operations(conn, list(operations))
        payments = await modifications.payments_of(conn, list(rows.values()))
        return {
            operation_id: Modification(row, payments[row.payment_id])
            for operation_id, row in rows.items()
            if row.payment_id in payments
        }

    async def operation_for_key(self, conn: Connection, provider_key: str) -> uuid.UUID | None:
        return await modifications.operation_for_key(conn, provider_key, self.type)

    # What operators see.

    def body(self, subject: Modification) -> dict[str, Any]:
        return modification_json(subject.row)

    def took_effect(self, found: ProviderModification) -> bool:
        # The provider keeps only captures and voids it made.
        return True

    def show(self, found: ProviderModification) -> dict[str, Any]:
        return {
            f"{self.type.value}_id": found.reference,
            "status": "succeeded",
            "charge_id": found.charge_id,
            "amount_minor": found.amount_minor,
        }


class CaptureKind(ModificationKind[CaptureCommand]):
    """A capture of (part of) an authorization: never more than it has left, never after a
    void or once its hold lapsed."""

    name: ClassVar[str] = OperationName.CAPTURE_PAYMENT
    noun: ClassVar[str] = "capture"
    record_name: ClassVar[str] = "capture"
    search: ClassVar[Searchable] = search.CAPTURES
    type: ClassVar[ModificationType] = ModificationType.CAPTURE
    succeeded_event: ClassVar[EventType] = EventType.PAYMENT_CAPTURED
    failed_event: ClassVar[EventType] = EventType.PAYMENT_CAPTURE_FAILED

    @classmethod
    def build(cls, parts: KindParts) -> CaptureKind:
        return cls(providers=parts.providers)

    def upkeep(self, db: Database, deliver: Callable[[EventWrite], EventWrite]) -> Upkeep:
        """Holds that lapse expire (`expiry.py`): the captures' kind runs it, once."""
        return HoldExpiry(db, deliver)

    def _validate(self, command: CaptureCommand, payment: PaymentRow) -> None:
        _amount_minor(command, payment.currency)

    def _refusal(self, locked: LockedPayment, command: CaptureCommand) -> ProblemError | None:
        payment = locked.payment
        if (in_flight := super()._refusal(locked, command)) is not None:
            return in_flight
        if PaymentStatus(payment.status) not in CAPTURABLE:
            return PaymentNotCapturable(
                "only an AUTHORIZED or PARTIALLY_CAPTURED payment can be captured; "
                f"this one is {payment.status}"
            )
        if locked.lapsed:
            assert payment.capture_before is not None
            return PaymentNotCapturable(
                f"the authorization lapsed at {payment.capture_before.isoformat()}; "
                "nothing was sent"
            )
        capturable = payment.amount_capturable_minor
        amount_minor = _amount_minor(command, payment.currency)
        if amount_minor is not None and amount_minor > capturable:
            left = format_minor_units(capturable, payment.currency)
            return CaptureExceedsCapturable(
                f"the authorization has {left} {payment.currency} left to capture",
                amount_capturable=left,
            )
        return None

    def _amounts(self, command: CaptureCommand) -> dict[int, int | None] | None:
        if command.amount is None:
            return None
        return {e: _fits(command, currency) for e, currency in _BY_EXPONENT.items()}

    def _leaves(self, payment: PaymentRow, row: ModificationRow) -> tuple[PaymentStatus, int]:
        captured = payment.amount_captured_minor + row.amount_minor
        full = captured >= payment.amount_minor
        return (PaymentStatus.CAPTURED if full else PaymentStatus.PARTIALLY_CAPTURED), captured


class VoidKind(ModificationKind[VoidCommand]):
    """A void of an authorization: releases what it has left, never after a full capture."""

    name: ClassVar[str] = OperationName.VOID_PAYMENT
    noun: ClassVar[str] = "void"
    record_name: ClassVar[str] = "void"
    search: ClassVar[Searchable] = search.VOIDS
    type: ClassVar[ModificationType] = ModificationType.VOID
    succeeded_event: ClassVar[EventType] = EventType.PAYMENT_VOIDED
    failed_event: ClassVar[EventType] = EventType.PAYMENT_VOID_FAILED

    @classmethod
    def build(cls, parts: KindParts) -> VoidKind:
        return cls(providers=parts.providers)

    def _refusal(self, locked: LockedPayment, command: VoidCommand) -> ProblemError | None:
        payment = locked.payment
        if (in_flight := super()._refusal(locked, command)) is not None:
            return in_flight
        if PaymentStatus(payment.status) not in CAPTURABLE:
            return PaymentNotVoidable(
                "only an AUTHORIZED or PARTIALLY_CAPTURED payment can be voided; "
                f"this one is {payment.status}"
            )
        return None

    def _leaves(self, payment: PaymentRow, row: ModificationRow) -> tuple[PaymentStatus, int]:
        captured = payment.amount_captured_minor
        return (PaymentStatus.CAPTURED if captured else PaymentStatus.VOIDED), captured


# One currency of each exponent: a capture's amount in minor units depends on that alone.
_BY_EXPONENT = {e: min(c for c, x in CURRENCY_EXPONENTS.items() if x == e) for e in EXPONENTS}


def _fits(command: CaptureCommand, currency: str) -> int | None:
    """The capture's amount in `currency`'s minor units; None when it does not fit it."""
    try:
        return command.amount_minor(currency)
    except AmountError:
        return None


def _amount_minor(command: CaptureCommand, currency: str) -> int | None:
    """The capture's amount in the payment's minor units; a `422 VALIDATION_ERROR` (nothing
    stored: the claim's guard refused it) when it does not fit the currency."""
    try:
        return command.amount_minor(currency)
    except AmountError as exc:
        raise ValidationFailed(
            "the capture request is invalid", errors=[{"field": "amount", "message": str(exc)}]
        ) from None
