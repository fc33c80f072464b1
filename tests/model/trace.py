"""Counterexamples as a person reads them: one step a line, and the world it led to (for the
charge protocol, and for two-step payments)."""

from __future__ import annotations

from collections.abc import Callable

from tests.model.modifications import Modifications
from tests.model.protocol import Protocol
from tests.model.search import Rules, Violation, W
from tests.model.two_step import Clock, Kind, Release, TwoStep, request_name
from tests.model.two_step import key_name as modification_key
from tests.model.world import Phase, Verdict, World, is_charge, key_name

VERDICTS = {
    Verdict.APPROVE: "approves",
    Verdict.DECLINE_ELSEWHERE: "declines (retryable elsewhere)",
    Verdict.REJECT: "rejects it as invalid",
    Verdict.UNDECIDED: "undecided",
}


def describe_verdicts(w: World) -> str:
    """What each provider does with the payment."""
    if all(v is Verdict.UNDECIDED for v in w.verdicts):
        return "each provider decides what it does when a request first reaches it"
    return ", ".join(f"provider {p} {VERDICTS[v]}" for p, v in enumerate(w.verdicts))


def describe_world(w: World, protocol: Protocol) -> str:
    """The operation rows, the providers' ledgers and the requests on the network, in one line."""
    names = protocol.names
    rows = []
    for row in w.rows:
        lease = "expired"
        if row.lease_live:
            holder = "?" if row.lease_owner is None else names[row.lease_owner]
            lease = f"held by {holder}"
        rows.append(
            f"{row.state.name} attempt {row.attempt} fence {row.fence}"
            f" attempts {row.attempts} lease {lease}" + (" (earlier day)" if row.earlier else "")
        )
    ledger = (
        ", ".join(key_name(k) + ("" if is_charge(w, k) else " declined") for k in sorted(w.ledger))
        or "empty"
    )
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


def format_violation(v: Violation[World], protocol: Protocol) -> str:
    """The shortest trace to the violation, one step a line."""
    start = f"{describe_verdicts(v.start)} | {describe_world(v.start, protocol)}"
    return format_trace(v, start, lambda w: describe_world(w, protocol))


def format_trace(v: Violation[W], start: str, describe: Callable[[W], str]) -> str:
    """The shortest trace to the violation, one step a line, each world told by `describe`."""
    lines = [f"violated: {v.invariant}", f" 0. start: {start}"]
    for n, (step, w) in enumerate(v.trace, 1):
        verb = step.verb + (f"/{step.trigger}" if step.trigger else "")
        lines.append(f"{n:>2}. {step.actor}: {verb}: {step.text}")
        lines.append(f"      -> {describe(w)}")
    return "\n".join(lines)


def replays(v: Violation[W], rules: Rules[W]) -> bool:
    """Whether each step of the trace is one the rules can take from the world before it."""
    world = v.start
    for step, after in v.trace:
        if (step, after) not in rules.successors(world):
            return False
        world = after
    return True


CLOCKS = {
    Clock.BEFORE: "capture_before ahead",
    Clock.PASSING: "capture_before passing",
    Clock.AFTER: "capture_before passed",
}


def describe_requests(w: TwoStep) -> str:
    """What each client asks for with its key."""
    return "clients ask for " + ", ".join(request_name(r) for r in w.requests)


def describe_two_step(w: TwoStep, rules: Modifications) -> str:
    """The payment, its captures and voids, the provider's ledger and the network, in one line."""
    names = rules.names
    books = w.books
    release = {Release.VOID: ", rest released by a void", Release.EXPIRY: ", rest expired"}
    text = (
        f"payment: {books.status.name} captured {books.captured}"
        f"{release.get(books.release, '')}, {CLOCKS[w.clock]}"
    )
    for mod in w.mods:
        if mod is None:
            continue
        lease = "expired"
        if mod.lease_live:
            lease = "held by " + ("?" if mod.lease_owner is None else names[mod.lease_owner])
        text += f" | {modification_key(mod.key)}: {mod.state.name} fence {mod.fence} lease {lease}"
    ledger = ", ".join(
        f"{modification_key(key)} " + (f"captured {amount}" if key[0] is Kind.CAPTURE else "voided")
        for key, amount in sorted(w.ledger)
    )
    text += f" | provider: {ledger or 'nothing'}"
    awaited = [
        f"{modification_key(rules.key(w, o))} ({names[i]} waits)"
        for i, o in enumerate(w.owners)
        if o.phase is Phase.AWAITING
    ]
    late = [f"{modification_key(key)} (nobody waits)" for key, _ in sorted(w.orphans)]
    if awaited or late:
        text += " | on the network: " + ", ".join(awaited + late)
    return text


def format_two_step(v: Violation[TwoStep], rules: Modifications) -> str:
    """The shortest trace to a violation of the two-step model, one step a line."""
    start = f"{describe_requests(v.start)} | {describe_two_step(v.start, rules)}"
    return format_trace(v, start, lambda w: describe_two_step(w, rules))
