"""The protocol on the real repository, database and provider, under random interleavings.

A hypothesis state machine plays two clients sending the same request and two workers on one
idempotency key per example: claims, takeovers, worker passes, lookups, sends (answered,
refused, answer lost, or left on the network to land late or never), outcomes recorded,
leases running out, processes dying, owners writing on stale beliefs. Every step is a real
repository verb on the test PostgreSQL or a real call to the fake provider, decided as the
service decides: by the service's own rules (`idempotency/rules.py`: what a taken key answers,
whether a takeover drives again, what an own send records; `recovery/reconcile.py`: which
trigger a resend fires, which checks count), not a copy of them; after every step the rows,
the audit trail and the provider's ledger must keep the invariants (`check_protocol`,
`check_write` in `tests/support/stateful/world.py`), and at the end the service's own reconciler
must finish the operation. More: STATEFUL_EXAMPLES=500 STATEFUL_STEPS=80.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

import hypothesis
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from app.idempotency.rules import KeyAnswer, drives_again, key_answer, own_send_trigger
from app.operations.outcomes import Indefinite
from app.operations.states import TERMINAL, State, Trigger
from app.operations.values import OwnedRef, stored_response
from app.provider.client import Charge, ChargeRequest
from app.recovery.reconcile import counts_as_check, resend_trigger
from tests.support.control.faults import FaultInjector
from tests.support.factories.tenants import make_tenant
from tests.support.fixtures.repository import AsyncDb
from tests.support.stateful.calls import Calls
from tests.support.stateful.world import (
    DECLARED,
    OUTCOMES,
    Heard,
    Mode,
    Owners,
    Phase,
    charge_request,
    check_protocol,
    check_write,
    new_command,
    operation_row,
    read_rows,
)

CALLS = ["answered", "refused", "answer lost", "left on the network"]
SETTINGS = settings(
    max_examples=int(os.environ.get("STATEFUL_EXAMPLES", "40")),
    stateful_step_count=int(os.environ.get("STATEFUL_STEPS", "50")),
    deadline=None,
    phases=[p for p in hypothesis.Phase if p is not hypothesis.Phase.explain],  # slow here
    # Most rules have preconditions (an owner must be ready for them), so many draws are
    # discarded by design.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class ProtocolMachine(RuleBasedStateMachine):
    def __init__(self, calls: Calls) -> None:
        super().__init__()
        self.calls, self.db = calls, calls.db
        self.owners = Owners()  # two clients sending the same request, two workers
        self.op_id = uuid.UUID(int=0)  # until a claim wins
        self.row: dict[str, Any] = {}
        self.network: list[ChargeRequest] = []  # sent, neither landed nor lost yet
        self.sent_keys: set[str] = set()
        self.attempts = 0  # recovery checks that settled nothing, counted by the test
        # Faults per example, as in the model: once spent, everything behaves, and every
        # example can still finish. A lease ending after its holder died is no fault.
        self.budget = {"crash": 2, "expiry": 2, "stale write": 6, "early pass": 3}

    @property
    def claimed(self) -> bool:
        return self.op_id.int != 0

    @initialize(outcome=st.sampled_from(OUTCOMES))
    def setup(self, outcome: str) -> None:
        self.tenant = make_tenant(self.db, "stateful protocol")
        self.idem, self.command = f"stateful-{uuid.uuid4().hex}", new_command(outcome)

    # Clients: the claim, or a takeover of what the key already holds. (While another
    # owner's lease is live a request is answered 409: it moves nothing, so none is sent.)

    @precondition(lambda self: self.owners.ready("claim") and not self.row.get("lease_live"))
    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        o = self.owners.pick(data, "claim")
        claimed = self.calls.claim(self.tenant.id, self.idem, self.command, o.name)
        if claimed is not None:
            assert not self.claimed, "a second claim won a key that was taken"
            (ref, o.payment), self.op_id = claimed, claimed[0].id
            self.owners.hold(o, ref, Phase.SENDING, Mode.FIRST)
            note(f"{o.name} claims the key: {ref.state} at fence 1")
            return
        snapshot = self.calls.find(self.tenant.id, self.idem)
        assert snapshot is not None
        assert snapshot.operation.id == self.op_id
        answer = key_answer(snapshot.state, lease_live=snapshot.lease_live)
        if answer is KeyAnswer.REPLAY:
            stored_response(snapshot.operation)  # a replay has the stored answer
        elif answer is KeyAnswer.TAKE_OVER:
            o.phase, o.snapshot = Phase.READ, snapshot
        op, live = snapshot.operation, "live" if snapshot.lease_live else "expired"
        note(f"{o.name} finds the key taken: {op.state} at fence {op.fence}, lease {live}")

    @precondition(lambda self: self.owners.ready("take_over"))
    @rule(data=st.data())
    def take_over(self, data: st.DataObject) -> None:
        o = self.owners.pick(data, "take_over")
        assert o.snapshot is not None
        seen, before = o.snapshot.operation.fence, operation_row(self.db, self.op_id)
        answer = key_answer(State(before["state"]), lease_live=before["lease_live"])
        ref = self.calls.take_over(o.snapshot, o.name)
        note(f"{o.name} take_over at fence {seen}: {f'fence {ref.fence}' if ref else 'lost'}")
        free = answer is KeyAnswer.TAKE_OVER and before["fence"] == seen
        assert (ref is not None) == free, before
        retry = ref is not None and drives_again(ref.state)
        self.owners.hold(o, ref, Phase.OWNED, Mode.RETRY if retry else Mode.RECOVER)

    # Workers: the batch claim of what is due, scoped to this example's operation. A few
    # passes per example come while nothing is due, and must take nothing.

    def pass_due(self) -> bool:
        due = self.row.get("due") or (self.claimed and self.budget["early pass"] > 0)
        return bool(due and self.owners.ready("claim_due"))

    @precondition(lambda self: self.pass_due())
    @rule(data=st.data())
    def claim_due(self, data: st.DataObject) -> None:
        o = self.owners.pick(data, "claim_due")
        self.budget["early pass"] -= not self.row["due"]
        before = operation_row(self.db, self.op_id)
        refs = self.calls.claim_due(o.name, self.op_id)
        note(f"{o.name} claim_due: {[f'{r.state} fence {r.fence}' for r in refs]}")
        assert {r.id for r in refs} <= {self.op_id}, "claim_due took another test's operation"
        assert bool(refs) == before["due"], f"claim_due of {before['state']}: {refs}"
        self.owners.hold(o, refs[0] if refs else None, Phase.OWNED, Mode.RECOVER)

    # The provider: lookups and charges under the payment's derived key.

    @precondition(lambda self: self.owners.ready("lookup"))
    @rule(data=st.data(), available=st.booleans())
    def lookup(self, data: st.DataObject, available: bool) -> None:
        o = self.owners.pick(data, "lookup")
        o.payment = self.calls.payment(self.op_id)
        if not available:
            self.calls.fault("lookup_unavailable", o.payment.provider_key)
        o.heard, o.charge = self.calls.lookup(o.payment.provider_key)
        o.phase = Phase.LOOKED
        note(f"{o.name} looks the charge up: {o.heard.value}")
        assert (o.heard is Heard.UNAVAILABLE) == (not available)

    @precondition(lambda self: self.owners.ready("mark_sent"))
    @rule(data=st.data())
    def mark_sent(self, data: st.DataObject) -> None:
        o = self.owners.pick(data, "mark_sent")
        assert o.ref is not None
        # A retry's trigger, or the reconciler's after a lookup that found nothing.
        trigger = Trigger.RETRY if o.mode is Mode.RETRY else resend_trigger(o.ref.state)
        moved = self.write(o.name, o.ref, trigger)
        if moved is not None:
            o.payment = self.calls.payment(self.op_id)
        self.owners.hold(o, moved, Phase.SENDING, o.mode)

    @precondition(lambda self: self.owners.ready("call"))
    @rule(data=st.data(), how=st.sampled_from(CALLS))
    def call_provider(self, data: st.DataObject, how: str) -> None:
        o = self.owners.pick(data, "call")
        assert o.payment is not None
        request = charge_request(o.payment)
        self.sent_keys.add(request.provider_key)
        note(f"{o.name} calls the provider: {how}")
        o.phase, o.heard, o.charge = Phase.ANSWERED, Heard.UNKNOWN, None
        if how == "left on the network":  # the owner times out; the request may land later
            self.network.append(request)
            return
        if how != "answered":
            fault = "unavailable" if how == "refused" else "drop_after_commit"
            self.calls.fault(fault, request.provider_key)
        o.heard, o.charge = self.calls.charge(request)
        expected = {"refused": {Heard.NOT_SENT}, "answer lost": {Heard.UNKNOWN}}
        assert o.heard in expected.get(how, {Heard.CHARGED, Heard.REJECTED}), o.heard

    @precondition(lambda self: self.network)
    @rule(index=st.integers(0, 3), lands=st.booleans())
    def network_delivers(self, index: int, lands: bool) -> None:
        request = self.network.pop(index % len(self.network))
        note(f"a request left on the network {'lands late' if lands else 'is lost'}")
        if lands:
            self.calls.land_late(request)

    # Recording what came of it, decided as the service decides.

    @precondition(lambda self: self.owners.ready("record"))
    @rule(data=st.data())
    def record(self, data: st.DataObject) -> None:
        o = self.owners.pick(data, "record")
        assert o.ref is not None
        recovering, counts = o.mode is Mode.RECOVER, False
        if o.heard in (Heard.CHARGED, Heard.FOUND):
            trigger = Trigger.COMPLETE
        elif o.heard is Heard.REJECTED:
            trigger = Trigger.FAIL
        elif o.heard is Heard.UNAVAILABLE:
            trigger, counts = Trigger.LOSE, True  # a failed lookup is a check
        else:  # a send without a definite answer, as the service records it
            sent = Indefinite(o.ref, "no definite answer", not_sent=o.heard is Heard.NOT_SENT)
            if recovering:  # the reconciler: unknown still, even a refused resend
                trigger, counts = Trigger.LOSE, counts_as_check(sent)
            else:  # the keyed flow's own send: 503 to retry, or unknown
                trigger = own_send_trigger(sent)
        moved = self.write(o.name, o.ref, trigger, charge=o.charge, counts=counts)
        self.attempts += moved is not None and counts
        o.forget()

    # Time, crashes, and owners acting on what they believed earlier.

    def working(self) -> bool:
        """Whether the holder of the current fence is still at work (paused, or slow)."""
        return any(o.ref and o.ref.fence == self.row["fence"] for o in self.owners.ready("crash"))

    @precondition(
        lambda self: self.row.get("waiting") and (self.budget["expiry"] or not self.working())
    )
    @rule()
    def time_passes(self) -> None:
        """Every lease runs out and the next check comes, as the clock would have it."""
        self.budget["expiry"] -= self.working()
        self.calls.time_passes(self.op_id)

    @precondition(lambda self: self.budget["crash"] and self.owners.ready("crash"))
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """The owner's process dies: it forgets everything; its lease stays until it ends."""
        self.budget["crash"] -= 1
        self.owners.pick(data, "crash").forget()

    @precondition(lambda self: self.budget["stale write"] and self.owners.stale(self.row))
    @rule(data=st.data())
    def stale_write(self, data: st.DataObject) -> None:
        self.budget["stale write"] -= 1
        fence, state = data.draw(
            st.sampled_from(self.owners.stale(self.row)), label="stale (fence, state)"
        )
        trigger = data.draw(st.sampled_from(sorted(t for s, t in DECLARED if s is state)))
        ref = OwnedRef(
            self.op_id, self.tenant.id, self.row["created_at"], fence, state, self.row["attempts"]
        )
        late = Charge("ch_stale", "succeeded", None)
        assert self.write("stale owner", ref, trigger, charge=late) is None

    def write(self, actor: str, ref: OwnedRef, trigger: Trigger, **how: Any) -> OwnedRef | None:
        """Fire `trigger` as `actor` (`how`: the charge a COMPLETE records, whether a LOSE
        counts as a recovery check); a stale owner's write must change nothing."""
        before = read_rows(self.db, ref.id)
        moved = self.calls.fire(actor, ref, trigger, **how)
        was = before.operation
        note(
            f"{actor} {trigger.value} from {ref.state} at fence {ref.fence}, row at fence "
            f"{was['fence']} {was['state']}: {'lands' if moved else 'fenced out'}"
        )
        check_write(ref, trigger, moved, before, read_rows(self.db, ref.id))
        return moved

    @invariant()
    def protocol_holds(self) -> None:
        if not self.claimed:
            return
        now = read_rows(self.db, self.op_id)
        self.row = now.operation
        charge = self.calls.charge_under(now.payment["provider_key"])
        in_flight = bool(self.network or self.owners.ready("call"))
        check_protocol(now, charge, self.sent_keys, in_flight, self.attempts)

    def teardown(self) -> None:
        if not self.claimed:
            return
        if sys.exc_info()[1] is not None:  # a failing step is the report: only clean up
            self.calls.forget_unfinished(self.op_id)
            return
        reached = self.calls.finish(self.op_id, late=self.network)
        self.network.clear()
        assert reached in TERMINAL, f"the operation cannot be finished: {reached}"
        self.protocol_holds()
        assert len(self.calls.charges_on(self.command.account_id)) <= 1, "two charges"


def test_protocol_under_random_interleavings(
    async_db: AsyncDb, faults: FaultInjector, database_url: str
) -> None:
    # `faults` clears the provider's fault rules before and after.
    with Calls.open(async_db, faults.url, database_url) as calls:

        class Machine(ProtocolMachine):
            def __init__(self) -> None:
                super().__init__(calls)

        run_state_machine_as_test(Machine, settings=SETTINGS)
