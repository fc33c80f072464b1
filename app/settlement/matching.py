"""One record's verdict: how our record and the provider's differ, if they do.

Pure: it reads the two sides and says what to queue, and the run (`run.py`) writes it. Our
side is a payment, a refund or a capture with its operation's state; theirs is what the
provider holds under the same derived key. The rules, for a record whose key is one of ours:

    ours                          theirs                      verdict
    none                          made (succeeded,            orphan
                                    authorized)
    none                          declined / none             nothing (no money moved)
    not final (in flight,         any                         recover: the reconciler settles
      unknown)                                                 it (nothing queued)
    FAILED_RETRYABLE              made                        orphan ("certainly not sent")
    took effect (SUCCEEDED...)    none                        missing
                                  declined, authorized        status_mismatch
                                  succeeded, differing        amount / currency / status
                                    amount, currency or         mismatch, one item each
                                    refunded amount
                                  succeeded, equal, not       expected (not an exception:
                                    settled yet                  inside the settlement lag)
    authorized (a manual          none                        missing
      payment, AUTHORIZED ...)    not authorized              status_mismatch
                                  authorized, differing       amount / currency / status
                                    amount, currency, or        mismatch, one item each
                                    captured or refunded
                                    amount
                                  authorized, equal           agreed (nothing settles: its
                                                                captures do)
    declined (DECLINED)           made                        status_mismatch
    failed (FAILED)               made                        orphan (we say not charged)
    declined / failed             declined / none             nothing

A refund or capture took effect when SUCCEEDED and failed when FAILED; the provider's refunds
and captures all succeeded. A manual payment the provider approved is an authorization on
both sides: ours AUTHORIZED, PARTIALLY_CAPTURED, CAPTURED, VOIDED or EXPIRED (or refunded
after its captures), theirs `authorized` whatever became of it. It settles nothing itself:
its money settles through its captures, each a record of its own on its own day, so its
record compares what was authorized and what both books say was captured (and refunded) of
it, never a settlement line. Whether it was voided is not compared: a void moves no money,
and a hold that lapsed (EXPIRED) is ours alone (the provider's lapses on its own clock). A
member a lookup did not give (None) is not compared; nor is an authorization's captured
amount while a capture or void of it is in flight (one side may have it before the other).

With several providers, a record of ours is expected at the provider holding it (a payment:
its route's provider at its attempt, under that attempt's key; a refund or capture: its
provider, under its key), and is judged there by `judge`; a record held under another key of
ours is a stray (`strays.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.operations.states import State
from app.provider.keys import attempt_key
from app.provider.registry import DEFAULT_NAME
from app.settlement.books import TheirRecord
from app.settlement.rows import ItemKind, RecordType

# Our statuses that say the money moved, and those that say it did not.
TOOK_EFFECT = frozenset({"SUCCEEDED", "PARTIALLY_REFUNDED", "REFUNDED"})
DECLINED = "DECLINED"
# A manual payment's statuses once the provider authorized it (refunded ones: of what its
# captures took).
HELD = frozenset(
    {"AUTHORIZED", "PARTIALLY_CAPTURED", "CAPTURED", "VOIDED", "EXPIRED"} | TOOK_EFFECT
)
# The provider's statuses of a record that moved money (a listed charge says how much of it
# was refunded in its status too).
THEY_CHARGED = frozenset({"succeeded", "partially_refunded", "refunded"})
# The provider's status of a manual charge it approved, whatever was captured of it since.
AUTHORIZED = "authorized"
# A record the provider made: money taken, or held.
THEY_MADE = THEY_CHARGED | {AUTHORIZED}
KEY_PREFIXES = {
    RecordType.CHARGE: "payment-",
    RecordType.REFUND: "refund-",
    RecordType.CAPTURE: "capture-",
}
NOUNS = {RecordType.CHARGE: "charge", RecordType.REFUND: "refund", RecordType.CAPTURE: "capture"}
# Our operation's states that nothing will change without a client or an operator: a record
# of theirs against any other state is the reconciler's to settle.
SETTLED_STATES = frozenset({State.COMPLETED, State.FAILED, State.FAILED_RETRYABLE})


@dataclass(frozen=True)
class OurRecord:
    """A payment, refund or capture of ours, with its operation's state."""

    record_type: RecordType
    provider_key: str
    tenant_id: uuid.UUID
    operation_id: uuid.UUID
    operation_state: str
    payment_id: uuid.UUID
    refund_id: uuid.UUID | None
    status: str
    amount_minor: int
    currency: str
    amount_refunded_minor: int | None
    provider_id: str | None
    created_at: datetime
    # The provider holding it, by name: a payment's route at its attempt (once final, the
    # attempt its outcome came from), a refund's provider, a capture's (its authorization's).
    provider: str = DEFAULT_NAME
    # A payment's attempt (a refund or capture has only its key: 0).
    attempt: int = 0
    # A payment's whole route when it names more than one provider; None: `provider` alone.
    route: Sequence[str] | None = None
    # A capture's own id (its payment's is `payment_id`).
    capture_id: uuid.UUID | None = None
    # A manual payment (an authorization): what our books say it captured, and whether a
    # capture or void of it is in flight (`app/authorizations/books.py`).
    manual: bool = False
    amount_captured_minor: int | None = None
    modification_in_flight: bool = False

    @property
    def key(self) -> str:
        """The key `provider` holds it under: the attempt's key (a refund's or a capture's
        own key)."""
        return attempt_key(self.provider_key, self.attempt)

    def sent_to(self, attempt: int) -> str | None:
        """The provider attempt `attempt`'s key is sent to, and only it (None: no such
        attempt)."""
        route = self.route or (self.provider,)
        return route[attempt] if attempt < len(route) else None

    def snapshot(self) -> dict[str, Any]:
        """The record as an item shows it."""
        shown: dict[str, Any] = {
            "id": str(self.capture_id or self.refund_id or self.payment_id),
            "status": self.status,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "created_at": self.created_at.isoformat(),
            "operation_state": self.operation_state,
            "provider_id": self.provider_id,
        }
        if self.record_type is RecordType.CHARGE:
            shown["amount_refunded_minor"] = self.amount_refunded_minor
        if self.record_type is RecordType.CAPTURE:
            shown["payment_id"] = str(self.payment_id)
        if self.manual:
            shown["capture"] = "manual"
            shown["amount_captured_minor"] = self.amount_captured_minor
        if self.route is not None:
            # Several providers on its route: where its attempts went, and which one counts.
            shown["route"] = list(self.route)
            shown["attempt"] = self.attempt
        return shown


@dataclass(frozen=True)
class Difference:
    """One item to queue: its kind and what an operator reads about it."""

    kind: ItemKind
    detail: str


@dataclass(frozen=True)
class Verdict:
    """What one record comes to: the differences to queue, or a hand-over to recovery."""

    differences: tuple[Difference, ...] = field(default=())
    # Our operation is not final and the provider holds a record: the reconciler decides.
    recover: bool = False
    # Both sides agree on a record that took effect: the settlement line is its proof (an
    # authorization has none: its captures settle).
    agreed: bool = False
    # The decline a failover left behind under the key of the attempt it moved on from.
    failover_decline: bool = False


NOTHING = Verdict()


def is_our_key(record_type: RecordType, provider_key: str) -> bool:
    """Whether `provider_key` has the shape of a key we derive (`app/provider/keys.py`)."""
    prefix = KEY_PREFIXES[record_type]
    if not provider_key.startswith(prefix):
        return False
    try:
        uuid.UUID(provider_key[len(prefix) :])
    except ValueError:
        return False
    return True


def _money(minor: int, currency: str | None) -> str:
    return f"{minor} {currency or ''}".strip()


def _differs(ours: int | None, theirs: int | None) -> bool:
    return ours is not None and theirs is not None and ours != theirs


def _mismatches(ours: OurRecord, theirs: TheirRecord) -> list[Difference]:
    found: list[Difference] = []
    if ours.amount_minor != theirs.amount_minor:
        found.append(
            Difference(
                ItemKind.AMOUNT_MISMATCH,
                f"we recorded {_money(ours.amount_minor, ours.currency)}, the provider "
                f"{_money(theirs.amount_minor, theirs.currency)}",
            )
        )
    if theirs.currency is not None and ours.currency != theirs.currency:
        found.append(
            Difference(
                ItemKind.CURRENCY_MISMATCH,
                f"we recorded {ours.currency}, the provider {theirs.currency}",
            )
        )
    # What became of it since: captured (an authorization's, unless a capture or void of it
    # is in flight) and refunded. One item, however many of them differ.
    moved: list[str] = []
    compare_captured = ours.manual and not ours.modification_in_flight
    if compare_captured and _differs(ours.amount_captured_minor, theirs.amount_captured_minor):
        moved.append(
            f"we recorded {ours.amount_captured_minor} captured, the provider "
            f"{theirs.amount_captured_minor}"
        )
    if _differs(ours.amount_refunded_minor, theirs.amount_refunded_minor):
        moved.append(
            f"we recorded {ours.amount_refunded_minor} refunded, the provider "
            f"{theirs.amount_refunded_minor}"
        )
    if moved:
        found.append(Difference(ItemKind.STATUS_MISMATCH, "; ".join(moved)))
    return found


def _one(kind: ItemKind, detail: str) -> Verdict:
    return Verdict((Difference(kind, detail),))


def _judge_authorization(ours: OurRecord, theirs: TheirRecord | None) -> Verdict:
    """A manual payment the provider authorized, by our books: both sides must agree it is
    an authorization, of the same amount, with as much captured and refunded of it. It
    settles nothing: its captures do, each on its own day."""
    if theirs is None:
        return _one(ItemKind.MISSING, "we recorded this authorization; the provider has none")
    if theirs.status != AUTHORIZED:
        return _one(
            ItemKind.STATUS_MISMATCH,
            f"we recorded this charge as authorized ({ours.status}), the provider as "
            f"{theirs.status}",
        )
    found = _mismatches(ours, theirs)
    return Verdict(tuple(found)) if found else Verdict(agreed=True)


def _made(noun: str, theirs: TheirRecord) -> str:
    """What the provider did with a record of one of our keys, as an item says it."""
    return "authorized this charge" if theirs.status == AUTHORIZED else f"made this {noun}"


def judge(
    record_type: RecordType, ours: OurRecord | None, theirs: TheirRecord | None, *, settled: bool
) -> Verdict:
    """The verdict on one key: `ours` and `theirs` as found (None: no record), and whether
    the provider's settlement report lists `theirs`."""
    noun = NOUNS[record_type]
    charged = theirs is not None and theirs.status in THEY_CHARGED
    if ours is None:
        if theirs is None or theirs.status not in THEY_MADE:
            return NOTHING
        return _one(ItemKind.ORPHAN, f"the provider {_made(noun, theirs)}; we have no record")
    if ours.operation_state == State.FAILED_RETRYABLE:
        if theirs is None or theirs.status not in THEY_MADE:
            return NOTHING
        return _one(
            ItemKind.ORPHAN,
            f"the provider {_made(noun, theirs)}; we recorded it as certainly not sent",
        )
    if ours.operation_state not in (State.COMPLETED, State.FAILED):
        return Verdict(recover=theirs is not None)
    if ours.manual and ours.status in HELD:
        return _judge_authorization(ours, theirs)
    if ours.status in TOOK_EFFECT:
        if theirs is None:
            return _one(ItemKind.MISSING, f"we recorded this {noun}; the provider has none")
        if not charged:
            return _one(
                ItemKind.STATUS_MISMATCH,
                f"we recorded this {noun} as succeeded, the provider as {theirs.status}",
            )
        found = _mismatches(ours, theirs)
        if found:
            return Verdict(tuple(found))
        if not settled:
            return Verdict(
                (Difference(ItemKind.EXPECTED, "agreed; the provider has not settled it yet"),),
                agreed=True,
            )
        return Verdict(agreed=True)
    if theirs is None or theirs.status not in THEY_MADE:
        return NOTHING
    if ours.status == DECLINED:
        made = "succeeded" if charged else theirs.status
        return _one(
            ItemKind.STATUS_MISMATCH,
            f"we recorded this {noun} as declined, the provider as {made}",
        )
    return _one(ItemKind.ORPHAN, f"the provider {_made(noun, theirs)}; we recorded it as not made")
