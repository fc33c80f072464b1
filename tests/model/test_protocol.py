"""The protocol model: the service's rules keep every invariant, and each broken rule is caught.

The search covers every interleaving of the owners, the network, the provider and the faults
within the small bound; `python -m tests.model --large` runs the large one.
"""

from __future__ import annotations

import pytest

from tests.model.__main__ import main
from tests.model.protocol import Protocol
from tests.model.search import (
    DEAD_END,
    FAILED_NOT_CHARGED,
    FENCED,
    ONE_CHARGE,
    RETRYABLE_NOT_CHARGED,
    Report,
    explore,
)
from tests.model.trace import format_violation, replays
from tests.model.world import SMALL, TWO_STEP_MUTATIONS, Mutation, World, initial_worlds

BROKEN_BY = {
    Mutation.UNFENCED_WRITE: FENCED,
    Mutation.NOT_FOUND_IS_FAILED: FAILED_NOT_CHARGED,
    Mutation.TIMEOUT_IS_NOT_SENT: RETRYABLE_NOT_CHARGED,
    Mutation.RESEND_NEW_KEY: ONE_CHARGE,
    Mutation.REFUSED_RESEND_IS_NOT_SENT: RETRYABLE_NOT_CHARGED,
    Mutation.LEASE_WITHOUT_FENCE: FENCED,
    Mutation.SELECT_THEN_INSERT: ONE_CHARGE,
    Mutation.RETRYABLE_NEVER_RETRIED: DEAD_END,
    Mutation.UNGUARDED_RESOLVE: FAILED_NOT_CHARGED,
    Mutation.ATTEMPT_NOT_PERSISTED: FAILED_NOT_CHARGED,
    Mutation.UNIQUE_PER_DAY: ONE_CHARGE,
}

# Searched with a wrong "not processed", which breaks these invariants by itself: test_attempts.
# Two-step payments' own mutations are that model's: test_modifications.
CAUGHT_HERE = [
    m for m in Mutation if m is not Mutation.LATEST_ATTEMPT_ONLY and m not in TWO_STEP_MUTATIONS
]

# A dead end is found only once the whole graph is explored, and the retry path it is on does
# not depend on failover: that one search runs with one provider, a fifth of the graph.
BOUNDS = {Mutation.RETRYABLE_NEVER_RETRIED: SMALL._replace(providers=1)}


def test_the_protocol_keeps_every_invariant(small_run: tuple[Report[World], Protocol]) -> None:
    report, protocol = small_run
    print(
        f"protocol at the small bound: {report.states} states, "
        f"{report.transitions} transitions, {report.seconds:.2f} s"
    )
    trace = "" if report.violation is None else format_violation(report.violation, protocol)
    assert report.violation is None, trace


@pytest.mark.parametrize("mutation", CAUGHT_HERE, ids=lambda m: m.value)
def test_each_broken_rule_is_caught(mutation: Mutation) -> None:
    bounds = BOUNDS.get(mutation, SMALL)
    protocol = Protocol(bounds, mutation)
    report = explore(protocol, initial_worlds(bounds))
    assert report.violation is not None, f"{mutation.value} went unnoticed"
    print(f"{mutation.value}: {len(report.violation.trace)} steps, {report.states} states")
    assert report.violation.invariant == BROKEN_BY[mutation], format_violation(
        report.violation, protocol
    )
    assert replays(report.violation, protocol)


def test_a_trace_is_a_path_the_protocol_can_take() -> None:
    protocol = Protocol(SMALL, Mutation.UNFENCED_WRITE)
    violation = explore(protocol, initial_worlds(SMALL)).violation
    assert violation is not None
    assert replays(violation, protocol)
    swapped = violation.trace[1], violation.trace[0], *violation.trace[2:]
    assert not replays(violation.__class__(violation.invariant, violation.start, swapped), protocol)


def test_the_command_prints_a_mutation_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mutation", Mutation.LEASE_WITHOUT_FENCE.value]) == 0
    out = capsys.readouterr().out
    assert f"violated: {FENCED}" in out
    assert "claim_due: takes the due PROVIDER_REQUEST_SENT operation, fence 1->1" in out
