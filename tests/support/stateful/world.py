"""The world of the stateful protocol test: owners, requests on the network, what it reads back.

An owner is one client request or one worker pass as the test drives it, step by step,
through the repository verbs and the provider; `Owner` is what it believes (its fence, the
state it last saw) and what it is about to do. The readers and checks here read the real
rows and the fake provider's ledger.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, NamedTuple

import psycopg
from hypothesis import strategies as st
from psycopg.rows import DictRow

from app.operations.states import TERMINAL, TRANSITIONS, State, Trigger
from app.operations.values import OwnedRef, Snapshot
from app.payments.rows import PaymentRow
from app.payments.schemas import CreatePaymentCommand
from app.provider.client import Charge, ChargeRequest

Db = psycopg.Connection[DictRow]
Row = dict[str, Any]

DECLARED: dict[tuple[State, Trigger], State] = {
    (source, trigger): dest for trigger, sources, dest in TRANSITIONS for source in sources
}
# What a stale owner's write must leave exactly as it was.
TRACKED = (
    "state",
    "fence",
    "attempts",
    "lease_owner",
    "lease_expires_at",
    "next_check_at",
    "needs_attention",
    "last_error",
    "response_status",
    "response_body",
    "updated_at",
)


class Phase(Enum):
    IDLE = "idle"  # no request under way
    READ = "read"  # lost the claim, read the row: about to take it over at the fence it saw
    OWNED = "owned"  # holds a fence: a retry sends next, a recovery looks up first
    LOOKED = "looked"  # the lookup by provider key answered (`heard`)
    SENDING = "sending"  # PROVIDER_REQUEST_SENT committed at its fence; about to call
    ANSWERED = "answered"  # holds the provider's answer (`heard`); about to record it


class Mode(Enum):
    FIRST = "first"  # the request that won the claim
    RETRY = "retry"  # a client driving a FAILED_RETRYABLE operation again
    RECOVER = "recover"  # a takeover of an in-flight or unknown operation


class Heard(Enum):
    CHARGED = "charged"
    REJECTED = "rejected"
    NOT_SENT = "not processed"
    UNKNOWN = "unknown"
    FOUND = "found"
    NOT_FOUND = "not found"
    UNAVAILABLE = "lookup unavailable"


@dataclass
class Owner:
    name: str
    worker: bool
    phase: Phase = Phase.IDLE
    mode: Mode = Mode.FIRST
    ref: OwnedRef | None = None
    snapshot: Snapshot | None = None
    payment: PaymentRow | None = None
    heard: Heard | None = None
    charge: Charge | None = None

    def can(self, step: str) -> bool:
        """Whether `step` is this owner's next move under the protocol."""
        looked = self.phase is Phase.LOOKED
        return {
            "claim": self.phase is Phase.IDLE and not self.worker,
            "claim_due": self.phase is Phase.IDLE and self.worker,
            "take_over": self.phase is Phase.READ,
            "lookup": self.phase is Phase.OWNED and self.mode is Mode.RECOVER,
            # A retry sends at once; a recovery only after a lookup that found nothing.
            "mark_sent": (self.phase is Phase.OWNED and self.mode is Mode.RETRY)
            or (looked and self.heard is Heard.NOT_FOUND),
            "call": self.phase is Phase.SENDING,
            "record": self.phase is Phase.ANSWERED
            or (looked and self.heard is not Heard.NOT_FOUND),
            "crash": self.phase is not Phase.IDLE,
        }[step]

    def forget(self) -> None:
        """Back to idle: an answered request, or a process that died (its lease stays)."""
        self.phase, self.ref, self.snapshot = Phase.IDLE, None, None
        self.heard, self.charge = None, None


class Owners(list[Owner]):
    """The owners of one example: two clients sending the same request, two workers."""

    def __init__(self) -> None:
        super().__init__(
            Owner(f"{role}-{n}", role == "worker") for role in ("client", "worker") for n in (1, 2)
        )
        self.held: set[tuple[int, State]] = set()  # every (fence, state) an owner believed

    def hold(self, o: Owner, ref: OwnedRef | None, phase: Phase, mode: Mode) -> None:
        """`o` holds `ref` now, or (None) lost: then it answers and is idle again."""
        if ref is None:
            o.forget()
            return
        o.phase, o.mode, o.ref, o.snapshot = phase, mode, ref, None
        self.held.add((ref.fence, ref.state))

    def stale(self, row: Row) -> list[tuple[int, State]]:
        """Beliefs owners held that are wrong now by the fence alone, or the state alone."""
        fence, state = row.get("fence"), row.get("state")
        return sorted((f, s) for f, s in self.held if (f == fence) != (s == state))

    def ready(self, step: str) -> list[Owner]:
        """The owners whose next move is `step`."""
        return [o for o in self if o.can(step)]

    def pick(self, data: st.DataObject, step: str) -> Owner:
        name = data.draw(st.sampled_from([o.name for o in self.ready(step)]), label="owner")
        return next(o for o in self if o.name == name)


# Whose charges the provider approves, declines, or rejects as invalid (recording nothing).
OUTCOMES = ["approved", "declined", "rejected"]


def new_command(outcome: str) -> CreatePaymentCommand:
    """A payment the provider will approve, decline or reject; but for a rejection, on an
    account of its own, so that its charges can be counted in the provider's ledger."""
    unique = uuid.uuid4().hex[:16]
    account = {"approved": f"acc_{unique}", "declined": f"acc_decline_{unique}"}
    return CreatePaymentCommand(1250, "EUR", account.get(outcome, "acc_reject"), "order-1", None)


def charge_request(payment: PaymentRow) -> ChargeRequest:
    """What every call for the payment sends (as the charge driver builds it)."""
    return ChargeRequest(
        provider_key=payment.provider_key,
        amount_minor=payment.amount_minor,
        currency=payment.currency,
        account_id=payment.account_id,
        reference=str(payment.id),
    )


def operation_row(db: Db, operation_id: uuid.UUID) -> Row:
    """The row, with whether its lease is live, whether `claim_due` should take it, and
    whether it waits for the clock (a lease or a next check), on the database clock."""
    row = db.execute(
        """SELECT *, lease_expires_at > now() AS lease_live,
            (lease_expires_at IS NULL OR lease_expires_at <= now()) AND (
                state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')
                OR (state = 'UNKNOWN_REQUIRES_RECOVERY' AND next_check_at <= now())) AS due,
            lease_expires_at > now() OR next_check_at > now() AS waiting
        FROM operations WHERE id = %s""",
        (operation_id,),
    ).fetchone()
    assert row is not None, f"no operation {operation_id}"
    return dict(row)


def payment_row(db: Db, operation_id: uuid.UUID) -> Row:
    """The operation's payment: the only one of its tenant (a claim that lost made none)."""
    rows = db.execute(
        "SELECT * FROM payments WHERE tenant_id = (SELECT tenant_id FROM operations WHERE id = %s)",
        (operation_id,),
    ).fetchall()
    assert [r["operation_id"] for r in rows] == [operation_id], f"payments: {rows}"
    return dict(rows[0])


def audit(db: Db, operation_id: uuid.UUID) -> list[Row]:
    rows = db.execute(
        "SELECT * FROM operation_transitions WHERE operation_id = %s ORDER BY id",
        (operation_id,),
    )
    return [dict(r) for r in rows.fetchall()]


class Rows(NamedTuple):
    """The operation, its payment and its audit trail, read together."""

    operation: Row
    payment: Row
    audit: list[Row]


def read_rows(db: Db, operation_id: uuid.UUID) -> Rows:
    return Rows(
        operation_row(db, operation_id), payment_row(db, operation_id), audit(db, operation_id)
    )


def check_write(
    ref: OwnedRef, trigger: Trigger, moved: OwnedRef | None, before: Rows, after: Rows
) -> None:
    """A verb lands exactly when the row still holds the owner's fence and state, moving by
    the declared edge with its audit row; otherwise it changes nothing at all."""
    was, now = before.operation, after.operation
    if (was["fence"], was["state"]) != (ref.fence, ref.state.value):
        assert moved is None, (
            f"a stale write landed: {ref.state}-{trigger}-> at fence {ref.fence} over "
            f"{was['state']} at fence {was['fence']}"
        )
        assert {c: now[c] for c in TRACKED} == {c: was[c] for c in TRACKED}
        assert (after.payment, after.audit) == (before.payment, before.audit)
        return
    dest = DECLARED[ref.state, trigger]
    assert moved == replace(ref, state=dest, attempts=now["attempts"])
    assert after.audit[:-1] == before.audit
    last = after.audit[-1]
    assert (last["from_state"], last["to_state"], last["trigger"], last["fence"]) == (
        ref.state.value,
        dest.value,
        trigger.value,
        ref.fence,
    )
    if trigger in (Trigger.SEND, Trigger.RETRY, Trigger.RESEND):
        assert now["lease_live"], "mark_sent did not renew the owner's lease"
        assert now["lease_owner"] == was["lease_owner"]
    else:
        assert now["lease_owner"] is None, "recording an outcome kept the lease"


def check_protocol(
    now: Rows, charge: Row | None, sent_keys: set[str], in_flight: bool, attempts: int
) -> None:
    """The invariants, on the rows and on the provider's charge under the payment's key."""
    row, paid, state = now.operation, now.payment, State(now.operation["state"])
    check_audit(now.audit, row)
    assert sent_keys <= {paid["provider_key"]}, f"a charge sent under another key: {sent_keys}"
    if state is State.COMPLETED:
        assert charge is not None, "COMPLETED without a charge at the provider"
        agreed = "DECLINED" if charge["status"] == "declined" else "SUCCEEDED"
        assert (paid["provider_charge_id"], paid["status"]) == (charge["charge_id"], agreed)
    elif state is State.FAILED:
        assert charge is None, "FAILED with a charge at the provider"
        assert paid["status"] == "FAILED"
    else:
        assert (paid["status"], paid["provider_charge_id"]) == ("PENDING", None)
    if state is State.FAILED_RETRYABLE:
        assert charge is None, "FAILED_RETRYABLE (503: nothing charged) with a charge"
        assert not in_flight, "FAILED_RETRYABLE while a request of ours may still land"
    assert row["attempts"] == attempts, "every recovery check that settles nothing counts"
    assert row["needs_attention"] == (state not in TERMINAL and attempts >= 3)


def check_audit(history: list[Row], row: Row) -> None:
    """Declared edges only, each starting where the last ended, under fences that never go
    down, ending in the row's state; the first two are the claim's."""
    edges = [(t["from_state"], t["trigger"], t["to_state"]) for t in history]
    assert edges[:2] == [
        (None, "claim", "RECEIVED"),
        ("RECEIVED", "send", "PROVIDER_REQUEST_SENT"),
    ], f"the claim's audit rows: {edges[:2]}"
    for before, (source, trigger, dest) in itertools.pairwise(edges[1:]):
        assert source == before[2], f"audit row {source} does not follow {before[2]}"
        declared = DECLARED.get((State(source), Trigger(trigger)))
        assert declared is State(dest), f"undeclared edge audited: {source} -{trigger}-> {dest}"
    fences = [t["fence"] for t in history]
    assert fences == sorted(fences), f"fences in the audit trail went down: {fences}"
    assert fences[-1] <= row["fence"], f"audited fence {fences[-1]} above the row's"
    assert edges[-1][2] == row["state"], f"state {row['state']}, last audited {edges[-1][2]}"


@contextmanager
def others_locked(locker: psycopg.Connection[Any], operation_id: uuid.UUID) -> Iterator[None]:
    """While open, `claim_due` (FOR UPDATE SKIP LOCKED) can see no operation but this one.

    Other tests' operations stay untouched: a second transaction holds their rows, and the
    worker's batch query skips locked rows, exactly as it skips another worker's.
    """
    with locker.transaction():
        locker.execute(
            "SELECT id FROM operations WHERE id <> %s AND state NOT IN ('COMPLETED', 'FAILED')"
            " FOR UPDATE SKIP LOCKED",
            (operation_id,),
        )
        yield
