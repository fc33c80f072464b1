"""Breadth-first search of every reachable world, its invariants, and dead ends.

Worlds are numbered in the order they are found, with the step that first reached each, so
the path back to an initial world is a shortest trace. Invariants are checked on each world
as it is found; the first to fail ends the search with its trace. Dead ends are found over
the whole explored graph: every world must still be able to reach a settled one, in which
each operation is COMPLETED or FAILED (reverse reachability from those worlds).

The search is the same for every model: `search` takes the rules (anything with
`successors`), the check and what "settled" means; `explore` is it for the charge protocol.
The invariants here are the charge protocol's; the two-step payments' are in
`modification_invariants.py`.
"""

from __future__ import annotations

import time
import typing
from array import array
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from tests.model.protocol import Protocol
from tests.model.steps import Edge, Step
from tests.model.world import TERMINAL, Op, World, charges_of, is_charge

W = TypeVar("W", bound=Hashable)


class Rules(typing.Protocol[W]):
    """What a search needs of a model: every step from a world, and the world it leads to."""

    def successors(self, w: W, /) -> Sequence[tuple[Step, W]]: ...


TWO_PROVIDERS = "never charged at two providers"
ONE_CHARGE = "at most one provider charge for the idempotency key"
COMPLETED_CHARGED = "COMPLETED implies charged, under the attempt it names"
FAILED_NOT_CHARGED = "FAILED implies not charged"
RETRYABLE_NOT_CHARGED = "FAILED_RETRYABLE implies not charged"
SUPERSEDED_NOT_CHARGED = "no charge under an attempt the operation has failed over from"
FENCED = "no write lands with a stale fence"
INVARIANTS = (
    TWO_PROVIDERS,
    ONE_CHARGE,
    COMPLETED_CHARGED,
    FAILED_NOT_CHARGED,
    RETRYABLE_NOT_CHARGED,
    SUPERSEDED_NOT_CHARGED,
    FENCED,
)


def double_charge(w: World) -> str | None:
    """The double-charge invariant `w` breaks, if any: the first two of `INVARIANTS`."""
    if len(w.ledger) < 2:
        return None
    charges = [key for key in w.ledger if is_charge(w, key)]
    if len({key[1] for key in charges}) > 1:
        return TWO_PROVIDERS
    return ONE_CHARGE if len(charges) > 1 else None


def first_broken(w: World) -> str | None:
    """The first invariant `w` breaks, if any."""
    broken = double_charge(w)
    if broken is not None:
        return broken
    for r, row in enumerate(w.rows):
        state = row.state
        if state is Op.COMPLETED:
            if not any(key[:2] == (r, row.attempt) and is_charge(w, key) for key in w.ledger):
                return COMPLETED_CHARGED
        elif state is Op.FAILED:
            if charges_of(w, r):
                return FAILED_NOT_CHARGED
        elif state is Op.FAILED_RETRYABLE and charges_of(w, r):
            return RETRYABLE_NOT_CHARGED
    for r, row in enumerate(w.rows):
        if row.attempt and any(
            k[0] == r and k[1] < row.attempt and is_charge(w, k) for k in w.ledger
        ):
            return SUPERSEDED_NOT_CHARGED
    return FENCED if w.stale_write else None


RECHARGED = "recovery never charges again what an earlier attempt charged"


def recharged(w: World) -> str | None:
    """`RECHARGED` if a recovery's send charged a payment an earlier attempt of which held a
    charge. The check of the searches with a wrong "not processed" (`Budget.lies`): such an
    answer breaks the other invariants by itself (the payment fails over, and the new
    attempt's own send may charge again), which no lookup can prevent; recovery's must not."""
    return RECHARGED if w.recharged else None


DEAD_END = "no dead end: COMPLETED or FAILED is still reachable"


@dataclass(frozen=True)
class Violation(Generic[W]):
    invariant: str
    start: W
    trace: tuple[tuple[Step, W], ...]  # each step and the world it led to


@dataclass(frozen=True)
class Report(Generic[W]):
    states: int
    transitions: int
    seconds: float
    violation: Violation[W] | None
    edges: frozenset[tuple[Edge, bool]]  # every state-machine edge asked for, and if it landed


def _settled(w: World) -> bool:
    return bool(w.rows) and all(row.state in TERMINAL for row in w.rows)


def explore(
    protocol: Protocol,
    starts: tuple[World, ...],
    *,
    dead_ends: bool = True,
    check: Callable[[World], str | None] = first_broken,
) -> Report[World]:
    """Search every world of the charge protocol reachable from `starts`; stop at the first
    violation.

    `check` names the invariant a world breaks: every one (`first_broken`), or the double
    charges alone (`double_charge`, with `dead_ends=False`), which finds the shortest trace
    to a double charge when a mutation also breaks another invariant sooner.
    """
    return search(protocol, starts, check=check, settled=_settled, dead_ends=dead_ends)


def search(
    rules: Rules[W],
    starts: tuple[W, ...],
    *,
    check: Callable[[W], str | None],
    settled: Callable[[W], bool],
    dead_ends: bool = True,
    dead_end: str = DEAD_END,
) -> Report[W]:
    """Search every world reachable from `starts` under `rules`; stop at the first world
    `check` names a broken invariant of; then, if `dead_ends`, look for a world from which
    no `settled` one can be reached (the invariant `dead_end`)."""
    began = time.perf_counter()
    index: dict[W, int] = {}
    worlds: list[W] = []
    parent = array("q")
    steps: list[Step | None] = []
    sources, targets = array("I"), array("I")
    edges: set[tuple[Edge, bool]] = set()

    def found(w: W, source: int, step: Step | None) -> Violation[W] | None:
        worlds.append(w)
        parent.append(source)
        steps.append(step)
        broken = check(w)
        if broken is not None:
            return Violation(broken, *_trace(worlds, parent, steps, len(worlds) - 1))
        return None

    def report(violation: Violation[W] | None) -> Report[W]:
        took = time.perf_counter() - began
        return Report(len(worlds), transitions, took, violation, frozenset(edges))

    transitions = 0
    for start in starts:
        new = index.setdefault(start, len(worlds)) == len(worlds)
        if new and (violation := found(start, -1, None)) is not None:
            return report(violation)
    successors = rules.successors
    n = 0
    while n < len(worlds):
        for step, nxt in successors(worlds[n]):
            if step.edge is not None:
                edges.add((step.edge, step.landed))
            count = len(worlds)
            target = index.setdefault(nxt, count)
            if target == count and (violation := found(nxt, n, step)) is not None:
                return report(violation)
            transitions += 1
            if dead_ends:
                sources.append(n)
                targets.append(target)
        n += 1
    if dead_ends:
        stuck = _first_dead_end(worlds, sources, targets, settled)
        if stuck is not None:
            return report(Violation(dead_end, *_trace(worlds, parent, steps, stuck)))
    return report(None)


def _first_dead_end(
    worlds: list[W], sources: array[int], targets: array[int], settled: Callable[[W], bool]
) -> int | None:
    """The first-found world from which no settled world can be reached, if any."""
    count = len(worlds)
    start = array("I", bytes(4 * (count + 1)))  # predecessors by target, as one flat array
    for t in targets:
        start[t + 1] += 1
    for k in range(count):
        start[k + 1] += start[k]
    fill = array("I", start)
    preds = array("I", bytes(4 * len(targets)))
    for s, t in zip(sources, targets, strict=True):
        preds[fill[t]] = s
        fill[t] += 1
    good = bytearray(count)
    stack = [k for k, w in enumerate(worlds) if settled(w)]
    for k in stack:
        good[k] = 1
    while stack:
        k = stack.pop()
        for p in preds[start[k] : start[k + 1]]:
            if not good[p]:
                good[p] = 1
                stack.append(p)
    return next((k for k in range(count) if not good[k]), None)


def _trace(
    worlds: list[W], parent: array[int], steps: list[Step | None], last: int
) -> tuple[W, tuple[tuple[Step, W], ...]]:
    path: list[tuple[Step, W]] = []
    k = last
    while (step := steps[k]) is not None:
        path.append((step, worlds[k]))
        k = parent[k]
    return worlds[k], tuple(reversed(path))
