"""Attempts across providers: failover only when the attempt provably charged nothing.

The protocol's own search (test_protocol.py) explores two providers at the small bound; here,
each broken failover rule is shown to charge the payment at two providers, with the shortest
trace to that double charge (a search that checks the double-charge invariants alone, as the
mutation may break another invariant sooner), and recovery's lookup is shown to cover every
attempt: with a wrong "not processed" (a charge under an attempt failed over from), a
recovery that looks up the latest attempt alone charges the payment again.
"""

from __future__ import annotations

import pytest

from tests.model.__main__ import main
from tests.model.protocol import Protocol
from tests.model.search import (
    RECHARGED,
    SUPERSEDED_NOT_CHARGED,
    TWO_PROVIDERS,
    double_charge,
    explore,
    first_broken,
    recharged,
)
from tests.model.trace import format_violation, replays
from tests.model.world import (
    SMALL,
    WRONG_NOT_PROCESSED,
    Mode,
    Mutation,
    Op,
    Owner,
    Phase,
    Result,
    Row,
    Verdict,
    World,
    approved_everywhere,
    initial_worlds,
    is_charge,
)

FAILOVER_MUTATIONS = (
    Mutation.TIMEOUT_IS_NOT_SENT,  # a timeout or lost answer taken as "not processed"
    Mutation.REFUSED_RESEND_IS_NOT_SENT,  # a refused recovery resend taken as "not processed"
    Mutation.ATTEMPT_NOT_PERSISTED,  # the next attempt sent before it is written
)


@pytest.mark.parametrize("mutation", FAILOVER_MUTATIONS, ids=lambda m: m.value)
def test_each_broken_failover_rule_charges_at_two_providers(mutation: Mutation) -> None:
    protocol = Protocol(SMALL, mutation)
    report = explore(protocol, approved_everywhere(SMALL), dead_ends=False, check=double_charge)
    violation = report.violation
    assert violation is not None, f"{mutation.value} never charged twice"
    print(f"{mutation.value}: {len(violation.trace)} steps, {report.states} states")
    assert violation.invariant == TWO_PROVIDERS, format_violation(violation, protocol)
    assert any(step.verb == "next_attempt" for step, _ in violation.trace)
    assert replays(violation, protocol)


def _recovering(ledger: frozenset[tuple[int, int, int]], attempt: int) -> tuple[World, Owner]:
    row = Row(Op.UNKNOWN_REQUIRES_RECOVERY, 0, 2, 2, True, 2, attempt)
    owner = Owner(Phase.OWNED, 0, 2, 2, row.state, Mode.RECOVER, Result.NONE, attempt)
    verdicts = (Verdict.DECLINE_ELSEWHERE, Verdict.APPROVE)
    world = initial_worlds(SMALL)[0]._replace(verdicts=verdicts, rows=(row,), ledger=ledger)
    return world, owner


def test_recovery_looks_up_every_attempt() -> None:
    protocol = Protocol(SMALL)
    world, owner = _recovering(frozenset({(0, 1, 0)}), attempt=1)
    assert protocol.look_up(world, owner)[:2] == (Result.FOUND, 1)
    world, owner = _recovering(frozenset({(0, 0, 0)}), attempt=1)
    assert protocol.look_up(world, owner)[:2] == (Result.NOT_FOUND, 1)
    world, owner = _recovering(frozenset({(0, 0, 0)}), attempt=0)
    assert protocol.look_up(world, owner)[:2] == (Result.DECLINED, 0)
    approved = world._replace(verdicts=(Verdict.APPROVE, Verdict.APPROVE))
    assert protocol.look_up(approved, owner._replace(attempt=1))[:2] == (Result.FOUND, 0)
    latest_only = Protocol(SMALL, Mutation.LATEST_ATTEMPT_ONLY)
    assert latest_only.look_up(approved, owner._replace(attempt=1))[:2] == (Result.NOT_FOUND, 1)


def test_a_charge_under_an_attempt_failed_over_from_is_a_violation() -> None:
    # Under the failover rule no world has such a charge: only a wrong "not processed" makes
    # one (the searches below), and then recovery's lookup of every attempt is what finds it.
    world, _ = _recovering(frozenset({(0, 0, 0)}), attempt=1)
    assert first_broken(world) is None  # provider 0 declined it, retryable elsewhere
    charged = world._replace(verdicts=(Verdict.APPROVE, Verdict.APPROVE))
    assert first_broken(charged) == SUPERSEDED_NOT_CHARGED
    assert first_broken(charged._replace(rows=(charged.rows[0]._replace(attempt=0),))) is None


def test_the_command_prints_the_trace_to_a_double_charge(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--mutation", Mutation.ATTEMPT_NOT_PERSISTED.value, "--double-charge"]) == 0
    out = capsys.readouterr().out
    assert f"violated: {TWO_PROVIDERS}" in out
    assert "next_attempt: goes on to attempt 1 at provider 1 without writing it" in out
    assert "ledger: payment-0:0, payment-0:1" in out


def _charged_then_failed_over(w: World) -> bool:
    """A charge under attempt 0 while the operation is at attempt 1: the wrong answer's work."""
    return any(row.attempt == 1 for row in w.rows) and any(
        key[1] == 0 and is_charge(w, key) for key in w.ledger
    )


def test_recovery_finds_the_charge_a_wrong_not_processed_left_and_never_charges_again() -> None:
    protocol, seen = Protocol(WRONG_NOT_PROCESSED), []

    def check(w: World) -> str | None:
        if _charged_then_failed_over(w):
            seen.append(w)
        return recharged(w)

    report = explore(protocol, initial_worlds(WRONG_NOT_PROCESSED), dead_ends=False, check=check)
    print(f"wrong 'not processed': {report.states} states, {report.seconds:.2f} s")
    trace = "" if report.violation is None else format_violation(report.violation, protocol)
    assert report.violation is None, trace
    # The fault is there to find: the payment failed over from a charged attempt, and a
    # recovery took it over (a worker, in a world where the first request's process died).
    assert seen, "the search never made a charge under an attempt failed over from"
    assert any(
        row.attempt == 1 and row.fence > 1 and row.state is Op.PROVIDER_REQUEST_SENT
        for w in seen
        for row in w.rows
    )


def test_a_recovery_that_looks_up_only_the_latest_attempt_charges_again() -> None:
    protocol = Protocol(WRONG_NOT_PROCESSED, Mutation.LATEST_ATTEMPT_ONLY)
    starts = initial_worlds(WRONG_NOT_PROCESSED)
    report = explore(protocol, starts, dead_ends=False, check=recharged)
    violation = report.violation
    assert violation is not None, "looking up only the latest attempt went unnoticed"
    print(f"latest-attempt-only: {len(violation.trace)} steps, {report.states} states")
    assert violation.invariant == RECHARGED, format_violation(violation, protocol)
    texts = [step.text for step, _ in violation.trace]
    assert any("answers 503 not processed (wrong)" in text for text in texts)
    assert any(step.verb == "next_attempt" for step, _ in violation.trace)
    assert "lookup by the key of attempt 1: no charge, NOT_FOUND" in texts
    assert violation.trace[-1][1].ledger == {(0, 0, 0), (0, 1, 0)}
    assert replays(violation, protocol)


def test_the_command_prints_the_trace_to_a_charge_made_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--mutation", Mutation.LATEST_ATTEMPT_ONLY.value]) == 0
    out = capsys.readouterr().out
    assert "1 wrong 'not processed'" in out
    assert f"violated: {RECHARGED}" in out
    assert "provider 0 charges, but answers 503 not processed (wrong)" in out
