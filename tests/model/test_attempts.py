"""Attempts across providers: failover only when the attempt provably charged nothing.

The protocol's own search (test_protocol.py) explores two providers at the small bound; here,
each broken failover rule is shown to charge the payment at two providers, with the shortest
trace to that double charge (a search that checks the double-charge invariants alone, as the
mutation may break another invariant sooner), and recovery's lookup is shown to cover every
attempt.
"""

from __future__ import annotations

import pytest

from tests.model.__main__ import main
from tests.model.protocol import Protocol
from tests.model.search import (
    SUPERSEDED_NOT_CHARGED,
    TWO_PROVIDERS,
    double_charge,
    explore,
    first_broken,
)
from tests.model.trace import format_violation, replays
from tests.model.world import (
    SMALL,
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


def test_a_charge_under_an_attempt_failed_over_from_is_a_violation() -> None:
    # Why looking up only the latest attempt would do in the model: the search finds no
    # world with such a charge. Recovery still looks up every attempt (see docs/protocol.md).
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
