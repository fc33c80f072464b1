"""Two-step payments in the model: captures and voids keep every invariant, and each broken
rule is caught.

The search covers every interleaving of two clients (each with its own key: a partial capture,
a whole one, or a void), a worker (recovery and expiry), the provider's ledger of captures and
voids, the network, the clock passing capture_before and the faults, within the small bound;
`python -m tests.model --large` runs the large one.
"""

from __future__ import annotations

import pytest

from app.operations.states import TRANSITIONS
from tests.model.__main__ import main, run_two_step
from tests.model.modification_invariants import (
    BOOKS_AGREE,
    NO_CAPTURE_AFTER_RELEASE,
    NO_VOID_AFTER_FULL_CAPTURE,
    ONE_EFFECT_PER_KEY,
    ONE_IN_FLIGHT,
    STUCK,
    WITHIN_AUTHORIZATION,
    modification_broken,
    modifications_settled,
    search_modifications,
)
from tests.model.modifications import Modifications
from tests.model.provider_ledger import process
from tests.model.search import FENCED, Report, search
from tests.model.steps import ACTIVE
from tests.model.trace import format_two_step, replays
from tests.model.two_step import (
    AMOUNT,
    CAPTURE_ALL,
    PAYMENT,
    TWO_STEP_SMALL,
    Books,
    Clock,
    Key,
    Kind,
    Release,
    Status,
    TwoStep,
    is_pending,
    provider_captured,
    two_step_worlds,
)
from tests.model.world import SHARED_MUTATIONS, TWO_STEP_MUTATIONS, Mutation, Op, Result

BROKEN_BY = {
    Mutation.CAPTURE_AFTER_VOID: NO_CAPTURE_AFTER_RELEASE,
    Mutation.OVER_CAPTURE: WITHIN_AUTHORIZATION,
    Mutation.CAPTURE_RESENT_NEW_KEY: WITHIN_AUTHORIZATION,
    Mutation.CAPTURE_LOST_IS_FAILED: BOOKS_AGREE,
    Mutation.VOID_AFTER_FULL_CAPTURE: NO_VOID_AFTER_FULL_CAPTURE,
    Mutation.EXPIRY_IN_FLIGHT: NO_CAPTURE_AFTER_RELEASE,
    Mutation.MODIFICATIONS_NOT_EXCLUSIVE: ONE_IN_FLIGHT,
    Mutation.KEY_PER_PAYMENT: ONE_EFFECT_PER_KEY,
    Mutation.UNFENCED_WRITE: FENCED,
    Mutation.RETRYABLE_NEVER_RETRIED: STUCK,
}
CAUGHT_HERE = [m for m in Mutation if m in TWO_STEP_MUTATIONS | SHARED_MUTATIONS]

# What the rules must be seen to do, or the search would prove little: every way a payment
# ends, a capture after capture_before that the expiry waits for, a deferred send, a request
# left on the network, an owner that goes on after it was taken over.
PATHS = {
    "captured in two parts",
    "captured in one",
    "voided",
    "voided after a partial capture",
    "expired",
    "expired after a partial capture",
    "declined",
    "captured at the provider after capture_before, not expired",
    "deferred",
    "a request nobody waits for",
    "a stale owner",
}


def paths(w: TwoStep) -> set[str]:
    """The PATHS world `w` shows."""
    books, seen = w.books, set()
    completed = [m for m in w.mods if m is not None and m.state is Op.COMPLETED]
    captures = [m for m in completed if m.request.kind is Kind.CAPTURE]
    if books.status is Status.CAPTURED and books.release is Release.NONE:
        seen.add("captured in two parts" if len(captures) == 2 else "captured in one")
    if books.release is Release.VOID:
        seen.add("voided after a partial capture" if books.captured else "voided")
    if books.release is Release.EXPIRY:
        seen.add("expired after a partial capture" if books.captured else "expired")
    if books.status is Status.DECLINED:
        seen.add("declined")
    for mod in w.mods:
        if mod is None:
            continue
        if mod.state is Op.FAILED_RETRYABLE:
            seen.add("deferred")
        at_provider = any(key == mod.key for key, _ in w.ledger)
        capture = mod.request.kind is Kind.CAPTURE
        if capture and is_pending(mod) and at_provider and w.clock is Clock.AFTER:
            seen.add("captured at the provider after capture_before, not expired")
    if w.orphans:
        seen.add("a request nobody waits for")
    for o in w.owners:
        mod = w.mods[o.mod] if o.phase in ACTIVE else None
        if mod is not None and o.generation != mod.generation:
            seen.add("a stale owner")
    return seen


@pytest.fixture(scope="module")
def two_step_run() -> tuple[Report[TwoStep], Modifications, set[str]]:
    """The two-step model at the small bound, and the PATHS its worlds show."""
    rules, seen = Modifications(TWO_STEP_SMALL), set()

    def check(w: TwoStep) -> str | None:
        seen.update(paths(w))
        return modification_broken(w)

    report = search(
        rules,
        two_step_worlds(TWO_STEP_SMALL),
        check=check,
        settled=modifications_settled,
        dead_end=STUCK,
    )
    return report, rules, seen


def test_two_step_payments_keep_every_invariant(
    two_step_run: tuple[Report[TwoStep], Modifications, set[str]],
) -> None:
    report, rules, _ = two_step_run
    print(
        f"two-step payments at the small bound: {report.states} states, "
        f"{report.transitions} transitions, {report.seconds:.2f} s"
    )
    trace = "" if report.violation is None else format_two_step(report.violation, rules)
    assert report.violation is None, trace


def test_the_search_takes_every_path(
    two_step_run: tuple[Report[TwoStep], Modifications, set[str]],
) -> None:
    assert PATHS - two_step_run[2] == set()


@pytest.mark.parametrize("mutation", CAUGHT_HERE, ids=lambda m: m.value)
def test_each_broken_rule_is_caught(mutation: Mutation) -> None:
    report, rules = run_two_step(TWO_STEP_SMALL, mutation)
    violation = report.violation
    assert violation is not None, f"{mutation.value} went unnoticed"
    print(f"{mutation.value}: {len(violation.trace)} steps, {report.states} states")
    assert violation.invariant == BROKEN_BY[mutation], format_two_step(violation, rules)
    assert len(violation.trace) <= 10, format_two_step(violation, rules)
    assert replays(violation, rules)


def test_a_lost_capture_answer_is_looked_up_never_taken_as_not_sent() -> None:
    # Both broken readings of a lost answer, by the shortest traces: the capture is made, its
    # answer lost, and then either recorded FAILED or sent again under a new key.
    for mutation, last in (
        (Mutation.CAPTURE_LOST_IS_FAILED, "record_final"),
        (Mutation.CAPTURE_RESENT_NEW_KEY, "deliver"),
    ):
        violation = run_two_step(TWO_STEP_SMALL, mutation)[0].violation
        assert violation is not None
        texts = [step.text for step, _ in violation.trace]
        assert any(text.endswith("; the answer is lost") for text in texts), texts
        assert not any(step.verb == "find" for step, _ in violation.trace)
        assert violation.trace[-1][0].verb == last


def test_a_partial_capture_resent_under_a_new_key_is_captured_twice() -> None:
    # From the starts whose captures are partial, so that the provider takes the second one.
    starts = tuple(w for w in two_step_worlds(TWO_STEP_SMALL) if CAPTURE_ALL not in w.requests)
    rules = Modifications(TWO_STEP_SMALL, Mutation.CAPTURE_RESENT_NEW_KEY)
    violation = search_modifications(rules, starts).violation
    assert violation is not None
    assert violation.invariant == BOOKS_AGREE, format_two_step(violation, rules)
    last = violation.trace[-1][1]
    assert (last.books.captured, provider_captured(last)) == (1, 2)
    assert replays(violation, rules)


def test_a_key_derived_from_the_payment_names_two_captures() -> None:
    violation = run_two_step(TWO_STEP_SMALL, Mutation.KEY_PER_PAYMENT)[0].violation
    assert violation is not None
    step, last = violation.trace[-1]
    assert step.verb == "claim"
    assert "as capture-payment" in step.text
    assert [mod.key for mod in last.mods if mod is not None] == [(Kind.CAPTURE, PAYMENT, 0)] * 2


def _authorized(ledger: frozenset[tuple[Key, int]]) -> TwoStep:
    return two_step_worlds(TWO_STEP_SMALL)[0]._replace(
        books=Books(Status.AUTHORIZED), ledger=ledger
    )


def test_the_provider_replays_a_key_and_refuses_what_its_contract_says() -> None:
    part, whole = (Kind.CAPTURE, 0, 0), (Kind.CAPTURE, 1, 0)
    void: Key = (Kind.VOID, 1, 0)
    captured = _authorized(frozenset({(part, 1)}))
    # The same key and body: the stored capture, nothing more captured.
    result, after, _ = process(captured, part, 1)
    assert (result, after) == (Result.CHARGED, captured)
    # The same key, another body: 409.
    result, after, _ = process(captured, part, AMOUNT)
    assert (result, after.broken) == (Result.REJECTED, ONE_EFFECT_PER_KEY)
    # More than is left to capture; a capture after a void; a void after a full capture.
    assert process(captured, whole, AMOUNT)[1].broken == WITHIN_AUTHORIZATION
    voided = _authorized(frozenset({(void, 0)}))
    assert process(voided, part, 1)[1].broken == NO_CAPTURE_AFTER_RELEASE
    in_full = _authorized(frozenset({(whole, AMOUNT)}))
    assert process(in_full, void, 0)[1].broken == NO_VOID_AFTER_FULL_CAPTURE
    # What it takes: the rest of a partial capture, a void of what is left.
    result, after, _ = process(captured, whole, 1)
    assert (result, after.broken) == (Result.CHARGED, None)
    assert after.ledger == {(part, 1), (whole, 1)}
    assert process(captured, void, 0)[1].broken is None
    # It cannot know our books expired the payment: it captures, and that is the violation.
    expired = captured._replace(books=Books(Status.EXPIRED, 0, Release.EXPIRY))
    result, after, _ = process(expired, whole, 1)
    assert (result, after.broken) == (Result.CHARGED, NO_CAPTURE_AFTER_RELEASE)


DECLARED = {
    (trigger.value, source.value, dest.value)
    for trigger, sources, dest in TRANSITIONS
    for source in sources
}
# A capture or a void uses the charge's edges but failover (it goes to the payment's own
# provider) and fail: under these rules the provider refuses nothing we send, so nothing ends
# FAILED (the operator's fail, from UNKNOWN_REQUIRES_RECOVERY, is not modelled here).
MODIFICATION_EDGES = {
    ("send", "RECEIVED", "PROVIDER_REQUEST_SENT"),
    ("retry", "FAILED_RETRYABLE", "PROVIDER_REQUEST_SENT"),
    ("resend", "PROVIDER_REQUEST_SENT", "PROVIDER_REQUEST_SENT"),
    ("resend", "UNKNOWN_REQUIRES_RECOVERY", "PROVIDER_REQUEST_SENT"),
    ("complete", "PROVIDER_REQUEST_SENT", "COMPLETED"),
    ("complete", "UNKNOWN_REQUIRES_RECOVERY", "COMPLETED"),
    ("defer", "PROVIDER_REQUEST_SENT", "FAILED_RETRYABLE"),
    ("lose", "PROVIDER_REQUEST_SENT", "UNKNOWN_REQUIRES_RECOVERY"),
    ("lose", "UNKNOWN_REQUIRES_RECOVERY", "UNKNOWN_REQUIRES_RECOVERY"),
}


def test_captures_and_voids_take_only_the_state_machines_edges(
    two_step_run: tuple[Report[TwoStep], Modifications, set[str]],
) -> None:
    asked = {(e.trigger, e.source.name, e.dest.name) for e, _ in two_step_run[0].edges}
    landed = {(e.trigger, e.source.name, e.dest.name) for e, ok in two_step_run[0].edges if ok}
    assert asked == landed == MODIFICATION_EDGES
    assert MODIFICATION_EDGES <= DECLARED


def test_the_command_prints_a_two_step_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mutation", Mutation.EXPIRY_IN_FLIGHT.value]) == 0
    out = capsys.readouterr().out
    assert "two-step mutation expiry-in-flight" in out
    assert f"violated: {NO_CAPTURE_AFTER_RELEASE}" in out
    assert "worker: expire: reads the payment: capture_before passed, nothing in flight" in out
    assert "client 1: deliver: the provider captures 1 under capture-0" in out
