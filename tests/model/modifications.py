"""Two-step payments' rules: every step a client, a worker, the provider, the network or the
clock can take with the captures and voids of one authorized payment.

A capture or a void is an operation like a charge, run by the same rules (protocol.py), each
step standing for one repository verb, one provider call or one fault:

- the claim, under the payment's row lock, inserts the operation PROVIDER_REQUEST_SENT with its
  capture or void row and its derived provider key, if the payment can take it: capturable
  (AUTHORIZED or PARTIALLY_CAPTURED), now before capture_before and the amount no more than
  is capturable, for a capture; voidable (the same statuses), for a void; and no other capture
  or void in flight (modification_writes.py). A refused claim stores and sends nothing, so it
  changes no world and is no step;
- the owner calls the provider (provider_ledger.py); the answer may be lost, or be "not
  processed" (a fault); the owner may stop waiting, its request still on the network;
- a client's own send answered "not processed" is deferred (FAILED_RETRYABLE: nothing can
  arrive; its retry, same key, drives it again); anything unknown is UNKNOWN_REQUIRES_RECOVERY;
- recovery, a worker's or the client's sending its key again, takes the operation over (fence
  + 1) where no live lease is, looks its key up, records what it finds, or resends it with the
  same key; a lookup may be unavailable (a fault);
- the worker expires the payment once capture_before has passed, under the same lock as the
  claim, only with nothing in flight;
- an owner's process may die, and its lease expire; a lease may expire under an owner that
  still works (paused), whose writes the fence then stops.

The authorization is one step before all of this (two_step.py). A mutation changes one rule;
the search must find what it breaks.
"""

from __future__ import annotations

from tests.model.modification_writes import ModificationWrites
from tests.model.provider_ledger import look_up, on_the_network, process
from tests.model.steps import ACTIVE, Step, less
from tests.model.two_step import (
    AMOUNT,
    IDLE,
    Books,
    Clock,
    Key,
    Kind,
    Mod,
    ModOwner,
    Status,
    TwoStep,
    key_name,
    with_mod,
    with_owner,
)
from tests.model.world import TERMINAL, Mode, Mutation, Op, Phase, Result

TwoStepSuccessors = list[tuple[Step, TwoStep]]

CLOCK_PASSES = {
    Clock.BEFORE: "capture_before passes; a claim begun before may still commit",
    Clock.PASSING: "no claim begun before capture_before is left",
}

DUE = frozenset({Op.PROVIDER_REQUEST_SENT, Op.UNKNOWN_REQUIRES_RECOVERY})


def effect_name(key: Key, amount: int) -> str:
    return f"capture {amount}" if key[0] is Kind.CAPTURE else "void"


class Modifications(ModificationWrites):
    """Generates a world's successors under the service's rules, or a mutation of them."""

    def successors(self, w: TwoStep) -> TwoStepSuccessors:
        out: TwoStepSuccessors = []
        if w.books.status is Status.AUTHORIZING:
            self._authorization(w, out)  # until then every claim is refused: nothing moves
            return out
        self._clock(w, out)
        self._network(w, out)
        for i, o in enumerate(w.owners):
            phase = o.phase
            if phase is Phase.IDLE:
                if i < self.bounds.clients:
                    self._send_key(w, i, out)
                else:
                    self._worker(w, i, out)
            elif phase is Phase.READ:
                self._take_over(w, i, o, out)
            elif phase is Phase.SELECTED:
                self._expiry_write(w, i, out)
            elif phase is Phase.OWNED:
                self._owned(w, i, o, out)
            elif phase is Phase.LOOKED:
                self._looked(w, i, o, out)
            elif phase is Phase.SENDING:
                key = self.key(w, o)
                what = effect_name(key, self.amount(w, o))
                text = f"POST {key_name(key)} ({what}) goes to the provider"
                step = Step(self.names[i], "provider call", None, text)
                out.append((step, with_owner(w, i, o._replace(phase=Phase.AWAITING))))
            elif phase is Phase.AWAITING:
                self._await(w, i, o, out)
            elif phase is Phase.ANSWERED:
                self._record_answer(w, i, o, out)
            if w.budget.crashes and phase in ACTIVE:
                self._crash(w, i, o, out)
        return out

    # The authorization, the clock and the network

    @staticmethod
    def _authorization(w: TwoStep, out: TwoStepSuccessors) -> None:
        """The manual charge's outcome: its own protocol is the charge model's."""
        outcomes = (
            (Status.AUTHORIZED, f"the provider authorizes {AMOUNT}: AUTHORIZED"),
            (Status.DECLINED, "the provider declines it: DECLINED"),
        )
        for status, text in outcomes:
            step = Step("authorization", "outcome", None, text)
            out.append((step, w._replace(books=Books(status))))

    @staticmethod
    def _clock(w: TwoStep, out: TwoStepSuccessors) -> None:
        """capture_before passing, and leases running out (free if the holder is gone)."""
        if w.clock is not Clock.AFTER:
            text = CLOCK_PASSES[w.clock]
            step = Step("clock", "time", None, text)
            out.append((step, w._replace(clock=Clock(w.clock + 1))))
        for m, mod in enumerate(w.mods):
            if mod is None or not mod.lease_live:
                continue
            holder = None if mod.lease_owner is None else w.owners[mod.lease_owner]
            working = (
                holder is not None
                and holder.phase in ACTIVE
                and holder.mod == m
                and holder.generation == mod.generation
            )
            if working and not w.budget.expiries:
                continue
            after = with_mod(w, m, mod._replace(lease_owner=None, lease_live=False))
            if working:
                after = after._replace(budget=less(w.budget, expiries=1))
            who = "its owner still works (paused or slow)" if working else "its holder is gone"
            text = f"lease on {key_name(mod.key)} expires; {who}"
            out.append((Step("clock", "lease expiry", None, text), after))

    @staticmethod
    def _network(w: TwoStep, out: TwoStepSuccessors) -> None:
        """A request nobody waits for reaches the provider late, or never."""
        for entry in sorted(w.orphans):
            key, amount = entry
            gone = w._replace(orphans=w.orphans - {entry})
            _, after, what = process(gone, key, amount)
            text = f"late {key_name(key)} ({effect_name(key, amount)}): {what}"
            out.append((Step("network", "deliver", None, text), after))
            text = f"{key_name(key)} never reaches the provider"
            out.append((Step("network", "deliver", None, text), gone))

    # Clients and workers taking an operation

    def _send_key(self, w: TwoStep, i: int, out: TwoStepSuccessors) -> None:
        """Client `i` sends its request with its key: the claim, or the key found taken."""
        name, mod = self.names[i], w.mods[i]
        if mod is None:
            if self.refusal(w, i) is None:
                out.append(self.claim(w, i))
        elif mod.state in TERMINAL:
            step = Step(name, "claim", None, "key taken: replays the stored reply")
            out.append((step, with_owner(w, i, ModOwner(Phase.DONE))))
        elif not mod.lease_live and not self._never_retried(mod):
            # (under a live lease it is answered 409, and nothing moves)
            text = f"key taken: reads {mod.state.name} fence {mod.fence}, lease expired"
            owner = ModOwner(Phase.READ, i, mod.fence, 0, mod.state)
            out.append((Step(name, "claim", None, text), with_owner(w, i, owner)))

    def _never_retried(self, mod: Mod) -> bool:
        """The `retryable-never-retried` mutation: a FAILED_RETRYABLE key sent again is
        answered 503 again, and nothing moves."""
        never = self.mutation is Mutation.RETRYABLE_NEVER_RETRIED
        return never and mod.state is Op.FAILED_RETRYABLE

    def _take_over(self, w: TwoStep, i: int, o: ModOwner, out: TwoStepSuccessors) -> None:
        mod = self._mod(w, o)
        name = self.names[i]
        if mod.fence == o.fence and mod.state not in TERMINAL and not mod.lease_live:
            mode = Mode.RETRY if mod.state is Op.FAILED_RETRYABLE else Mode.RECOVER
            text = f"takes ownership of {mod.state.name}, fence {mod.fence}->{mod.fence + 1}"
            out.append((Step(name, "take_over", None, text), self._own(w, i, o.mod, mode)))
        else:
            text = "matches no row (fence moved, lease live or final): reads again"
            out.append((Step(name, "take_over", None, text), with_owner(w, i, IDLE)))

    def _worker(self, w: TwoStep, i: int, out: TwoStepSuccessors) -> None:
        name = self.names[i]
        for m, mod in enumerate(w.mods):
            if mod is not None and mod.state in DUE and not mod.lease_live:
                text = (
                    f"takes the due {mod.state.name} {key_name(mod.key)}, "
                    f"fence {mod.fence}->{mod.fence + 1}"
                )
                out.append((Step(name, "claim_due", None, text), self._own(w, i, m, Mode.RECOVER)))
        if not self.expirable(w):
            return
        if self.mutation is Mutation.EXPIRY_IN_FLIGHT:
            text = "reads the payment: capture_before passed, nothing in flight"
            out.append(
                (Step(name, "expire", None, text), with_owner(w, i, ModOwner(Phase.SELECTED)))
            )
        else:
            out.append(self.expire(w, i))

    def _expiry_write(self, w: TwoStep, i: int, out: TwoStepSuccessors) -> None:
        """The `expiry-in-flight` mutation's write, after its read: it checks the status only."""
        if self.expirable(w, in_flight_checked=False):
            out.append(self.expire(w, i))
        else:
            step = Step(self.names[i], "expire", None, "the payment moved on: nothing to do")
            out.append((step, with_owner(w, i, IDLE)))

    @staticmethod
    def _own(w: TwoStep, i: int, m: int, mode: Mode) -> TwoStep:
        """Owner `i` takes operation `m` over: fence + 1, a live lease, a new ownership."""
        mod = w.mods[m]
        assert mod is not None
        fence, generation = mod.fence + 1, mod.generation + 1
        owner = ModOwner(Phase.OWNED, m, fence, generation, mod.state, mode)
        new = mod._replace(fence=fence, lease_owner=i, lease_live=True, generation=generation)
        return with_mod(with_owner(w, i, owner), m, new)

    # An owner's work

    def _owned(self, w: TwoStep, i: int, o: ModOwner, out: TwoStepSuccessors) -> None:
        name = self.names[i]
        if o.mode is Mode.RETRY:
            out.append(self._mark_sent(w, i, o, "retry"))
            return
        result, what = look_up(w, self.key(w, o))
        step = Step(name, "find", None, f"lookup: {what}, {result.name}")
        out.append((step, with_owner(w, i, o._replace(phase=Phase.LOOKED, result=result))))
        if w.budget.faults:
            looked = o._replace(phase=Phase.LOOKED, result=Result.UNAVAILABLE)
            after = with_owner(w, i, looked)._replace(budget=less(w.budget, faults=1))
            out.append((Step(name, "find", None, "lookup unavailable (fault)"), after))

    def _looked(self, w: TwoStep, i: int, o: ModOwner, out: TwoStepSuccessors) -> None:
        if o.result is Result.FOUND:
            out.append(self._record(w, i, o, "record_final", "complete"))
        elif o.result is Result.UNAVAILABLE:
            out.append(self._record(w, i, o, "mark_unknown", "lose"))
        else:
            out.append(self._mark_sent(w, i, o, "resend"))

    def _await(self, w: TwoStep, i: int, o: ModOwner, out: TwoStepSuccessors) -> None:
        name, key, amount = self.names[i], self.key(w, o), self.amount(w, o)
        result, after, what = process(w, key, amount)
        answered = o._replace(phase=Phase.ANSWERED, result=result)
        out.append((Step(name, "deliver", None, what), with_owner(after, i, answered)))
        unknown = o._replace(phase=Phase.ANSWERED, result=Result.UNKNOWN)
        if after.budget.timeouts:
            lost = with_owner(after, i, unknown)._replace(budget=less(after.budget, timeouts=1))
            out.append((Step(name, "deliver", None, f"{what}; the answer is lost"), lost))
        if w.budget.faults:
            refused = o._replace(phase=Phase.ANSWERED, result=Result.NOT_PROCESSED)
            after = with_owner(w, i, refused)._replace(budget=less(w.budget, faults=1))
            out.append(
                (Step(name, "deliver", None, "the provider answers 503 not processed"), after)
            )
        if w.budget.timeouts:
            gone = on_the_network(with_owner(w, i, unknown), (key, amount))
            gone = gone._replace(budget=less(w.budget, timeouts=1))
            text = "stops waiting; the request is still on its way"
            out.append((Step(name, "timeout", None, text), gone))

    def _record_answer(self, w: TwoStep, i: int, o: ModOwner, out: TwoStepSuccessors) -> None:
        result, m = o.result, self.mutation
        capture = self._mod(w, o).request.kind is Kind.CAPTURE
        if result is Result.CHARGED:
            out.append(self._record(w, i, o, "record_final", "complete"))
        elif result is Result.REJECTED:
            out.append(self._record(w, i, o, "record_final", "fail"))
        elif result is Result.NOT_PROCESSED and o.mode is not Mode.RECOVER:
            out.append(self._record(w, i, o, "defer", "defer"))  # the only send: none can arrive
        elif result is Result.UNKNOWN and capture and m is Mutation.CAPTURE_LOST_IS_FAILED:
            out.append(self._record(w, i, o, "record_final", "fail"))
        elif result is Result.UNKNOWN and capture and m is Mutation.CAPTURE_RESENT_NEW_KEY:
            out.append(self._mark_sent(w, i, o, "resend", keygen=o.keygen + 1))
        else:
            out.append(self._record(w, i, o, "mark_unknown", "lose"))

    def _crash(self, w: TwoStep, i: int, o: ModOwner, out: TwoStepSuccessors) -> None:
        after = with_owner(w, i, IDLE)._replace(budget=less(w.budget, crashes=1))
        if o.phase is Phase.AWAITING:
            after = on_the_network(after, (self.key(w, o), self.amount(w, o)))
        out.append((Step(self.names[i], "crash", None, "process dies; its lease stays"), after))
