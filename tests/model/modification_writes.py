"""Two-step payments' writes: the claim and the expiry under the payment's row lock, and the
owners' fenced writes to a capture's or void's operation, with what each writes to the payment.

The claim is one transaction: lock the payment row, check that it can take the request (and
that no other capture or void is in flight), insert the operation PROVIDER_REQUEST_SENT with its
capture or void row and its provider key. The expiry takes the same lock, so a claim and an
expiry never interleave. Owner writes are the repository's `UPDATE ... WHERE id = ? AND fence =
? AND state = ?`, as for charges (writes.py); recording a capture adds its amount to the
payment's captured amount, recording a void releases the rest, in the same statement.
"""

from __future__ import annotations

from tests.model.search import FENCED
from tests.model.steps import DEST, Edge, Step
from tests.model.two_step import (
    AMOUNT,
    CAPTURABLE,
    DONE,
    IDLE,
    PAYMENT,
    Books,
    Clock,
    Key,
    Kind,
    Mod,
    ModOwner,
    Release,
    Status,
    TwoStep,
    TwoStepBounds,
    broke,
    is_pending,
    key_name,
    owner_names,
    request_name,
    with_mod,
    with_owner,
)
from tests.model.world import Mode, Mutation, Op, Phase, Result


class ModificationWrites:
    """The writes of two-step payments, under the service's rules or a mutation of them."""

    def __init__(self, bounds: TwoStepBounds, mutation: Mutation | None = None) -> None:
        self.bounds = bounds
        self.mutation = mutation
        self.names = owner_names(bounds)

    # The claim and the expiry, under the payment's row lock

    def refusal(self, w: TwoStep, i: int) -> str | None:
        """Why the claim of client `i`'s request is refused (nothing stored, nothing sent), or
        None if the payment takes it."""
        books, request, m = w.books, w.requests[i], self.mutation
        others = any(is_pending(mod) for mod in w.mods)
        if others and m is not Mutation.MODIFICATIONS_NOT_EXCLUSIVE:
            return "409 PAYMENT_MODIFICATION_IN_PROGRESS"
        if request.kind is Kind.VOID:
            voidable = books.status in CAPTURABLE or (
                m is Mutation.VOID_AFTER_FULL_CAPTURE
                and books.status is Status.CAPTURED
                and books.release is Release.NONE
            )
            return None if voidable else "409 PAYMENT_NOT_VOIDABLE"
        capturable = books.status in CAPTURABLE or (
            m is Mutation.CAPTURE_AFTER_VOID and books.release is Release.VOID
        )
        if not capturable or w.clock is Clock.AFTER:
            return "409 PAYMENT_NOT_CAPTURABLE"
        if request.amount > AMOUNT - books.captured and m is not Mutation.OVER_CAPTURE:
            return "422 CAPTURE_EXCEEDS_CAPTURABLE"
        return None

    def claim(self, w: TwoStep, i: int) -> tuple[Step, TwoStep]:
        """Client `i`'s request inserted PROVIDER_REQUEST_SENT, fence 1, its lease to the
        client, which calls the provider next."""
        request = w.requests[i]
        kind = request.kind
        key: Key = (kind, PAYMENT if self.mutation is Mutation.KEY_PER_PAYMENT else i, 0)
        mod = Mod(request, key, Op.PROVIDER_REQUEST_SENT, 1, i, True, 1)
        owner = ModOwner(Phase.SENDING, i, 1, 1, Op.PROVIDER_REQUEST_SENT, Mode.FIRST)
        after = with_mod(with_owner(w, i, owner), i, mod)
        books = w.books
        text = (
            f"under the payment's lock ({books.status.name}, captured {books.captured}): "
            f"inserts {request_name(request)} as {key_name(key)}, PROVIDER_REQUEST_SENT"
        )
        edge = Edge("send", Op.RECEIVED, Op.PROVIDER_REQUEST_SENT)
        return Step(self.names[i], "claim", "send", text, edge, True), after

    @staticmethod
    def expirable(w: TwoStep, *, in_flight_checked: bool = True) -> bool:
        """The worker's expiry may take the payment: capturable, capture_before passed, and no
        capture or void in flight (unless `in_flight_checked` is False: the `expiry-in-flight`
        mutation's write, which checked that in a read of its own before)."""
        if w.clock is Clock.BEFORE or w.books.status not in CAPTURABLE:
            return False
        return not in_flight_checked or not any(is_pending(mod) for mod in w.mods)

    def expire(self, w: TwoStep, i: int) -> tuple[Step, TwoStep]:
        books = w.books
        status = Status.CAPTURED if books.captured else Status.EXPIRED
        after = with_owner(w, i, IDLE)._replace(books=Books(status, books.captured, Release.EXPIRY))
        text = f"{books.status.name} -> {status.name}, the rest of the authorization released"
        return Step(self.names[i], "expire", None, text), after

    # The owners

    def key(self, w: TwoStep, o: ModOwner) -> Key:
        """The provider key owner `o` sends with: its modification's, stored at the claim."""
        kind, mod, _ = self._mod(w, o).key
        return (kind, mod, o.keygen)

    def amount(self, w: TwoStep, o: ModOwner) -> int:
        return self._mod(w, o).request.amount

    @staticmethod
    def _mod(w: TwoStep, o: ModOwner) -> Mod:
        mod = w.mods[o.mod]
        assert mod is not None, "an owner acts on a claimed modification"
        return mod

    def _mark_sent(
        self, w: TwoStep, i: int, o: ModOwner, trigger: str, *, keygen: int | None = None
    ) -> tuple[Step, TwoStep]:
        then = o._replace(
            phase=Phase.SENDING,
            believed=Op.PROVIDER_REQUEST_SENT,
            result=Result.NONE,
            keygen=o.keygen if keygen is None else keygen,
        )
        return self._write(w, i, o, "mark_sent", trigger, then, release=False)

    def _record(
        self, w: TwoStep, i: int, o: ModOwner, verb: str, trigger: str
    ) -> tuple[Step, TwoStep]:
        final = trigger in ("complete", "fail") and i < self.bounds.clients
        return self._write(w, i, o, verb, trigger, DONE if final else IDLE, release=True)

    def _write(
        self,
        w: TwoStep,
        i: int,
        o: ModOwner,
        verb: str,
        trigger: str,
        then: ModOwner,
        *,
        release: bool,
    ) -> tuple[Step, TwoStep]:
        """`UPDATE ... WHERE id = ? AND fence = ? AND state = ?`, through the state machine,
        with the payment's subject write of a completion in the same statement."""
        dest = DEST[trigger]
        edge = Edge(trigger, o.believed, dest)
        mod = self._mod(w, o)
        fence_ok = self.mutation is Mutation.UNFENCED_WRITE or mod.fence == o.fence
        if not (fence_ok and mod.state is o.believed):
            text = f"{o.believed.name}->{dest.name} fenced out: answers the current state"
            return Step(self.names[i], verb, trigger, text, edge, False), with_owner(w, i, IDLE)
        owner, live = (None, False) if release else (mod.lease_owner, True)
        new = mod._replace(state=dest, lease_owner=owner, lease_live=live)
        after = with_mod(with_owner(w, i, then), o.mod, new)
        text = f"{o.believed.name}->{dest.name} at fence {o.fence}"
        if trigger == "complete":
            books = completed(w.books, mod)
            after = after._replace(books=books)
            text += f"; payment {w.books.status.name}->{books.status.name}"
        if o.generation != mod.generation:
            after = broke(after, FENCED)
        return Step(self.names[i], verb, trigger, text, edge, True), after


def completed(books: Books, mod: Mod) -> Books:
    """The payment once a capture or a void is recorded COMPLETED: a capture adds its amount
    (CAPTURED once it reaches the authorization), a void releases the rest (VOIDED if nothing
    was captured, else CAPTURED)."""
    if mod.request.kind is Kind.CAPTURE:
        captured = books.captured + mod.request.amount
        status = Status.CAPTURED if captured >= AMOUNT else Status.PARTIALLY_CAPTURED
        return Books(status, captured, books.release)
    status = Status.CAPTURED if books.captured else Status.VOIDED
    return Books(status, books.captured, Release.VOID)
