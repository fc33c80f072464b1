"""Counterexamples as a person reads them: one step a line, and the world it led to."""

from __future__ import annotations

from tests.model.protocol import Protocol
from tests.model.search import Violation
from tests.model.world import Phase, World, key_name


def describe_world(w: World, protocol: Protocol) -> str:
    """The operation rows, the provider's ledger and the requests on the network, in one line."""
    names = protocol.names
    rows = []
    for row in w.rows:
        lease = "expired"
        if row.lease_live:
            holder = "?" if row.lease_owner is None else names[row.lease_owner]
            lease = f"held by {holder}"
        rows.append(f"{row.state.name} fence {row.fence} attempts {row.attempts} lease {lease}")
    ledger = ", ".join(key_name(k) for k in sorted(w.ledger)) or "empty"
    text = f"row: {'; '.join(rows) or 'absent'} | ledger: {ledger}"
    awaited = [
        f"{key_name(protocol.key(o))} ({names[i]} waits)"
        for i, o in enumerate(w.owners)
        if o.phase is Phase.AWAITING
    ]
    late = [f"{key_name(k)} (nobody waits)" for k in sorted(w.orphans)]
    if awaited or late:
        text += " | on the network: " + ", ".join(awaited + late)
    return text


def format_violation(v: Violation, protocol: Protocol) -> str:
    """The shortest trace to the violation, one step a line."""
    valid = "valid (the provider approves it)" if v.start.valid else "invalid (it rejects it)"
    lines = [
        f"violated: {v.invariant}",
        f" 0. start: the payment is {valid} | {describe_world(v.start, protocol)}",
    ]
    for n, (step, w) in enumerate(v.trace, 1):
        verb = step.verb + (f"/{step.trigger}" if step.trigger else "")
        lines.append(f"{n:>2}. {step.actor}: {verb}: {step.text}")
        lines.append(f"      -> {describe_world(w, protocol)}")
    return "\n".join(lines)


def replays(v: Violation, protocol: Protocol) -> bool:
    """Whether each step of the trace is one the protocol can take from the world before it."""
    world = v.start
    for step, after in v.trace:
        if (step, after) not in protocol.successors(world):
            return False
        world = after
    return True
