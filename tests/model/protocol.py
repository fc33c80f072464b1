"""The protocol's rules: every step an owner, the network, the provider or the clock can take.

Each step stands for one repository verb, one provider call or one fault, and is atomic as
the database makes it (one statement, one transaction). Owner writes are fenced (writes.py);
attempts, providers and failover are attempts.py's. A mutation changes one rule; everything
else stays as the service does it.
"""

from __future__ import annotations

from tests.model.attempts import Attempts
from tests.model.steps import (
    ACTIVE,
    DUE,
    Edge,
    Step,
    Successors,
    at,
    clock_and_network,
    orphan,
    own,
    spend,
    taking,
)
from tests.model.world import (
    IDLE,
    TERMINAL,
    Mode,
    Mutation,
    Op,
    Owner,
    Phase,
    Result,
    Role,
    Row,
    World,
    key_name,
    with_owner,
    with_row,
)


class Protocol(Attempts):
    """Generates a world's successors under the service's rules, or a mutation of them."""

    def successors(self, w: World) -> Successors:
        out: Successors = []
        clock_and_network(w, out)
        for i, o in enumerate(w.owners):
            phase = o.phase
            if phase is Phase.IDLE:
                self._idle(w, i, out)
                continue
            if phase is Phase.DONE:
                continue
            if phase is Phase.SELECTED:
                self._insert_after_select(w, i, out)
            elif phase is Phase.READ:
                self._take_over(w, i, o, out)
            elif phase is Phase.OWNED:
                self._owned(w, i, o, out)
            elif phase is Phase.LOOKED:
                self._looked(w, i, o, out)
            elif phase is Phase.SENDING:
                key = self.key(o)
                text = f"create_charge with key {key_name(key)} goes to provider {key[1]}"
                out.append(
                    (Step(self.names[i], "provider call", None, text), at(w, i, o, Phase.AWAITING))
                )
            elif phase is Phase.AWAITING:
                self._await(w, i, o, out)
            else:
                self._record_answer(w, i, o, out)
            if w.budget.crashes and phase in ACTIVE:
                self._crash(w, i, o, out)
        return out

    # Owners

    def _idle(self, w: World, i: int, out: Successors) -> None:
        name = self.names[i]
        if self.roles[i] is Role.OPERATOR:
            self._operator_takes(w, i, out)
        elif self.roles[i] is Role.WORKER:
            for r, row in enumerate(w.rows):
                if row.state in DUE and not row.lease_live:
                    fence = row.fence + self._bump
                    text = f"takes the due {row.state.name} operation, fence {row.fence}->{fence}"
                    owner = taking(r, row, fence, Mode.RECOVER)
                    out.append((Step(name, "claim_due", None, text), own(w, i, r, owner)))
        elif self.mutation is Mutation.SELECT_THEN_INSERT and not w.rows:
            step = Step(name, "claim", None, "SELECT finds no operation for the key")
            out.append((step, with_owner(w, i, Owner(Phase.SELECTED))))
        elif (held := self._holder(w)) is None:
            r = len(w.rows)
            per_day = self.mutation is Mutation.UNIQUE_PER_DAY
            where = "in today's partition" if per_day else "for the key's row"
            text = f"INSERT ... ON CONFLICT DO NOTHING wins {where}: operation {r}, RECEIVED"
            text += " then PROVIDER_REQUEST_SENT"
            out.append((self._claim_step(name, text), self._claimed(w, i, r)))
        else:
            self._read(w, i, held, out)

    def _holder(self, w: World) -> int | None:
        """The operation row the claim finds holding the key, where its uniqueness is decided:
        the key's row (`idempotency_keys`, one for the key whatever the day); or, under the
        unique-per-day mutation, a row in today's partition of operations."""
        if self.mutation is Mutation.UNIQUE_PER_DAY:
            return next((r for r, row in enumerate(w.rows) if not row.earlier), None)
        return w.keyed

    def _read(self, w: World, i: int, r: int, out: Successors) -> None:
        """The claim found the key taken: read the winner's row `r` (through the key's row)
        and answer from it."""
        name, row = self.names[i], w.rows[r]
        answer = None
        if row.state is Op.FAILED_RETRYABLE and self.mutation is Mutation.RETRYABLE_NEVER_RETRIED:
            answer = "answers 503 again without driving it"
        elif row.state in TERMINAL:
            answer = "replays the stored reply"
        elif row.lease_live:
            answer = "answers 409"
        if answer is not None:
            after = with_owner(w, i, self._finished(i))
            if after != w:
                out.append((Step(name, "claim", None, f"key taken, {answer}"), after))
            return
        text = f"key taken, reads {row.state.name} fence {row.fence}, lease expired"
        owner = Owner(Phase.READ, r, row.fence, 0, row.state)
        out.append((Step(name, "claim", None, text), with_owner(w, i, owner)))

    def _insert_after_select(self, w: World, i: int, out: Successors) -> None:
        r = len(w.rows)
        text = f"INSERTs operation {r}: no unique key decides the race"
        out.append((self._claim_step(self.names[i], text), self._claimed(w, i, r)))

    def _claim_step(self, name: str, text: str) -> Step:
        # The claim fires `send` from RECEIVED in the same statement that inserts the row
        # (and audits both): the state machine is asked for that edge, and it lands.
        edge = Edge("send", Op.RECEIVED, Op.PROVIDER_REQUEST_SENT)
        return Step(name, "claim", "send", text, edge, True)

    def _claimed(self, w: World, i: int, r: int) -> World:
        """Row `r` inserted claimed and sent, fence 1, in today's partition, with the key's row
        naming it (none under the unique-per-day mutation); its owner about to call the
        provider."""
        owner = Owner(Phase.SENDING, r, 1, 1, Op.PROVIDER_REQUEST_SENT, Mode.FIRST)
        row = Row(Op.PROVIDER_REQUEST_SENT, 0, 1, i, True, 1)
        after = with_row(with_owner(w, i, owner), r, row)
        if self.mutation is Mutation.UNIQUE_PER_DAY or w.keyed is not None:
            return after
        return after._replace(keyed=r)

    def _take_over(self, w: World, i: int, o: Owner, out: Successors) -> None:
        row = w.rows[o.row]
        fence_ok = self.mutation is Mutation.LEASE_WITHOUT_FENCE or row.fence == o.fence
        if fence_ok and row.state not in TERMINAL and not row.lease_live:
            fence = row.fence + self._bump
            mode = Mode.RETRY if row.state is Op.FAILED_RETRYABLE else Mode.RECOVER
            owner = taking(o.row, row, fence, mode)
            text = f"takes ownership of {row.state.name}, fence {row.fence}->{fence}"
            out.append((Step(self.names[i], "take_over", None, text), own(w, i, o.row, owner)))
        else:
            text = "matches no row (fence moved, lease live or terminal): reads again"
            out.append((Step(self.names[i], "take_over", None, text), with_owner(w, i, IDLE)))

    def _owned(self, w: World, i: int, o: Owner, out: Successors) -> None:
        if o.mode is Mode.FIRST:
            self._mark_sent(w, i, o, "send", out)
        elif o.mode is Mode.RETRY:
            self._mark_sent(w, i, o, "retry", out)
        else:
            result, attempt, what = self.look_up(w, o)
            if o.mode is Mode.RESOLVE and result is Result.DECLINED:
                result = Result.NOT_FOUND  # the operator resolves a decline as "not charged"
            if result is Result.NOT_FOUND and o.mode is Mode.RESOLVE and not self._quiet(w, i, o):
                result = Result.NOT_FOUND_RECENT
            every = o.attempt and self.mutation is not Mutation.LATEST_ATTEMPT_ONLY
            keys = f"the key of attempt{'s 0 to' if every else ''} {o.attempt}"
            text = f"lookup by {keys}: {what}, {result.name}"
            owner = Owner(
                Phase.LOOKED, o.row, o.fence, o.generation, o.believed, o.mode, result, attempt
            )
            out.append((Step(self.names[i], "find_charge", None, text), with_owner(w, i, owner)))
            if w.budget.faults:
                after = spend(at(w, i, o, Phase.LOOKED, Result.UNAVAILABLE), faults=1)
                step = Step(self.names[i], "find_charge", None, "lookup unavailable (fault)")
                out.append((step, after))

    def _looked(self, w: World, i: int, o: Owner, out: Successors) -> None:
        if o.mode is Mode.RESOLVE:
            self._resolve(w, i, o, out)
        elif o.result is Result.FOUND:
            self._record(w, i, o, "record_final", "complete", out)
        elif o.result is Result.UNAVAILABLE:
            self._record(w, i, o, "mark_unknown", "lose", out)
        elif o.result is Result.DECLINED:
            self._failover(w, i, o, out)
        elif self.mutation is Mutation.NOT_FOUND_IS_FAILED:
            self._record(w, i, o, "record_final", "fail", out)
        else:
            trigger = "send" if o.believed is Op.RECEIVED else "resend"
            self._mark_sent(w, i, o, trigger, out)

    def _await(self, w: World, i: int, o: Owner, out: Successors) -> None:
        name, key, timeouts = self.names[i], self.key(o), w.budget.timeouts
        answers = self.answers(w, o)
        self.lies(w, answers)
        if w.budget.faults:
            what = f"provider {key[1]} answers 503 not processed"
            answers.append((Result.NOT_PROCESSED, spend(w, faults=1), what))
        for result, after, what in answers:
            out.append(
                (
                    Step(name, "deliver", None, what),
                    at(after, i, o, Phase.ANSWERED, result),
                )
            )
            if after.budget.timeouts:
                lost = spend(at(after, i, o, Phase.ANSWERED, Result.UNKNOWN), timeouts=1)
                out.append((Step(name, "deliver", None, f"{what}; answer lost"), lost))
        if timeouts:
            gone = spend(orphan(at(w, i, o, Phase.ANSWERED, Result.UNKNOWN), key), timeouts=1)
            out.append(
                (Step(name, "timeout", None, "stops waiting; request still in flight"), gone)
            )

    def _record_answer(self, w: World, i: int, o: Owner, out: Successors) -> None:
        result = o.result
        if result is Result.UNKNOWN and self.mutation is Mutation.TIMEOUT_IS_NOT_SENT:
            result = Result.NOT_PROCESSED
        if result is Result.CHARGED:
            self._record(w, i, o, "record_final", "complete", out)
        elif result is Result.DECLINED:
            self._failover(w, i, o, out)  # only a provider with a next one declines so
        elif result is Result.REJECTED:
            self._record(w, i, o, "record_final", "fail", out)
        elif result is Result.NOT_PROCESSED and self.proves_nothing_sent(o):
            self._refused(w, i, o, out)
        else:
            self._record(w, i, o, "mark_unknown", "lose", out)

    def _crash(self, w: World, i: int, o: Owner, out: Successors) -> None:
        after = spend(with_owner(w, i, self._finished(i)), crashes=1)
        if o.phase is Phase.AWAITING:
            after = orphan(after, self.key(o))
        out.append((Step(self.names[i], "crash", None, "process dies; its lease stays"), after))

    # The operator

    def _operator_takes(self, w: World, i: int, out: Successors) -> None:
        """`take_over` of an unknown or stale in-flight row, as `resolve` does.

        The flag `needs_attention` is not modelled: the operator may act on any such row,
        at any time, which includes every row the service would let it resolve.
        """
        for r, row in enumerate(w.rows):
            if row.state in (Op.UNKNOWN_REQUIRES_RECOVERY, Op.PROVIDER_REQUEST_SENT) and not (
                row.lease_live
            ):
                fence = row.fence + self._bump
                text = f"takes {row.state.name} to resolve it, fence {row.fence}->{fence}"
                owner = taking(r, row, fence, Mode.RESOLVE)
                out.append((Step(self.names[i], "take_over", None, text), own(w, i, r, owner)))

    def _resolve(self, w: World, i: int, o: Owner, out: Successors) -> None:
        """Record what the provider's lookup confirms, or refuse and give the lease back.

        Found: "charged" agrees, complete. Not found, looked up when no request for the
        operation could still be on its way: "not charged" agrees, fail. Unavailable, not
        found too soon, or the operator says the contrary: refused, nothing written.
        """
        if o.result is Result.FOUND:
            self._record(w, i, o, "record_final", "complete", out)
        elif o.result is Result.NOT_FOUND:
            self._record(w, i, o, "record_final", "fail", out)
        row = w.rows[o.row]
        after = with_owner(w, i, self._finished(i))
        if row.fence == o.fence and row.lease_owner == i:
            after = with_row(after, o.row, row._replace(lease_owner=None, lease_live=False))
        text = "refused (the provider disagrees or cannot say): gives the lease back"
        out.append((Step(self.names[i], "release", None, text), after))

    def _quiet(self, w: World, i: int, o: Owner) -> bool:
        """No request for the operation is on the network or about to be sent.

        The service's guard stands for this: the last send began at least a lease ago, and
        a live owner's provider call never outlasts its lease, so a lookup made then sees
        every charge the operation can ever have. The guard is checked before the lookup.
        """
        if self.mutation is Mutation.UNGUARDED_RESOLVE:
            return True
        return not any(key[0] == o.row for key in w.orphans) and not any(
            j != i and other.row == o.row and other.phase in (Phase.SENDING, Phase.AWAITING)
            for j, other in enumerate(w.owners)
        )
