"""The model and the service's state machine agree on every transition.

The model fires its triggers from whatever state its owners believe the row is in, and the
repository asks the machine for that edge before every fenced write, landed or not. So the
set of edges the model asks for, over the whole graph at the small bound, must be exactly the
machine's table: an edge only the machine has is one the protocol never uses; an edge only the
model has would raise `IllegalTransition` in the service.
"""

from __future__ import annotations

from app.operations.states import TRANSITIONS
from tests.model.protocol import Protocol
from tests.model.search import Report
from tests.model.world import World

Triple = tuple[str, str, str]

DECLARED: set[Triple] = {
    (trigger.value, source.value, dest.value)
    for trigger, sources, dest in TRANSITIONS
    for source in sources
}

# Failover to the next provider's attempt: the model asked for these three edges before the
# service had them, and the machine gained exactly these (docs/protocol.md, "Attempts").
FAILOVER: set[Triple] = {
    ("failover", "PROVIDER_REQUEST_SENT", "PROVIDER_REQUEST_SENT"),
    ("failover", "UNKNOWN_REQUIRES_RECOVERY", "PROVIDER_REQUEST_SENT"),
    ("failover", "RECEIVED", "PROVIDER_REQUEST_SENT"),
}

# Asked for only by an owner whose fence is already stale: it looked the charges up while
# still believing RECEIVED, after a newer owner had sent and charged it (or had it declined
# and failed over). The write is fenced out; the edge lets it be refused by the fence (and
# answer the current state) rather than raise `IllegalTransition` first.
ONLY_EVER_FENCED_OUT: set[Triple] = {
    ("complete", "RECEIVED", "COMPLETED"),
    ("failover", "RECEIVED", "PROVIDER_REQUEST_SENT"),
}


def _edges(report: Report[World], *, landed_only: bool) -> set[Triple]:
    return {
        (edge.trigger, edge.source.name, edge.dest.name)
        for edge, landed in report.edges
        if landed or not landed_only
    }


def test_the_model_asks_for_exactly_the_declared_transitions(
    small_run: tuple[Report[World], Protocol],
) -> None:
    asked = _edges(small_run[0], landed_only=False)
    assert asked - DECLARED == set(), "the model takes transitions the state machine lacks"
    assert not DECLARED - asked, "the state machine allows transitions the model never takes"
    assert FAILOVER <= DECLARED, "the machine has the failover edges the model asks for"


def test_every_transition_lands_but_those_from_received_after_a_send(
    small_run: tuple[Report[World], Protocol],
) -> None:
    landed = _edges(small_run[0], landed_only=True)
    assert DECLARED - landed == ONLY_EVER_FENCED_OUT
    assert landed <= DECLARED
