"""The pieces every rule is made of: labelled steps, state-machine edges, and small updates.

Also the steps that are nobody's: the clock (a lease runs out, the day turns) and the network
(a request nobody waits for any more reaches the provider late, or never).
"""

from __future__ import annotations

from typing import NamedTuple

from tests.model.world import (
    SPENT,
    Budget,
    Key,
    Mode,
    Op,
    Owner,
    Phase,
    Result,
    Row,
    Verdict,
    World,
    deciding,
    key_name,
    with_owner,
    with_row,
)

DEST = {
    "send": Op.PROVIDER_REQUEST_SENT,
    "retry": Op.PROVIDER_REQUEST_SENT,
    "resend": Op.PROVIDER_REQUEST_SENT,
    "failover": Op.PROVIDER_REQUEST_SENT,
    "complete": Op.COMPLETED,
    "fail": Op.FAILED,
    "defer": Op.FAILED_RETRYABLE,
    "lose": Op.UNKNOWN_REQUIRES_RECOVERY,
}
"""Where each state-machine trigger leads; the sources are whatever the rules fire it from."""

# Phases in which an owner holds, or believes it holds, an operation.
ACTIVE = frozenset({Phase.OWNED, Phase.LOOKED, Phase.SENDING, Phase.AWAITING, Phase.ANSWERED})
DUE = frozenset({Op.RECEIVED, Op.PROVIDER_REQUEST_SENT, Op.UNKNOWN_REQUIRES_RECOVERY})


class Edge(NamedTuple):
    """A state-machine edge an owner asked for: `trigger` from `source` to `dest`."""

    trigger: str
    source: Op
    dest: Op


class Step(NamedTuple):
    """One labelled step of the search's graph."""

    actor: str  # an owner's name, or "clock", "network"
    verb: str  # the repository verb, provider call or fault it stands for
    trigger: str | None  # the state-machine trigger it fires, for owner writes
    text: str
    edge: Edge | None = None  # for owner writes: the edge asked of the state machine
    landed: bool = False  # for owner writes: the fenced UPDATE matched the row


Successors = list[tuple[Step, World]]


def at(w: World, i: int, o: Owner, phase: Phase, result: Result | None = None) -> World:
    """Owner `i` moves on to `phase` (with what it learnt)."""
    owner = Owner(
        phase,
        o.row,
        o.fence,
        o.generation,
        o.believed,
        o.mode,
        o.result if result is None else result,
        o.attempt,
    )
    return with_owner(w, i, owner)


def taking(r: int, row: Row, fence: int, mode: Mode) -> Owner:
    """An owner taking operation `r` over at `fence`: a new ownership, at the row's attempt."""
    return Owner(
        Phase.OWNED, r, fence, row.generation + 1, row.state, mode, Result.NONE, row.attempt
    )


def own(w: World, i: int, r: int, owner: Owner) -> World:
    """`owner` takes operation `r`: its fence, a live lease, a new ownership."""
    row = w.rows[r]
    new_row = row._replace(
        fence=owner.fence, lease_owner=i, lease_live=True, generation=owner.generation
    )
    return with_row(with_owner(w, i, owner), r, new_row)


def spend(
    w: World,
    *,
    crashes: int = 0,
    expiries: int = 0,
    faults: int = 0,
    timeouts: int = 0,
    lies: int = 0,
) -> World:
    left = less(
        w.budget, crashes=crashes, expiries=expiries, faults=faults, timeouts=timeouts, lies=lies
    )
    return w._replace(budget=left)


def less(
    b: Budget,
    *,
    crashes: int = 0,
    expiries: int = 0,
    faults: int = 0,
    timeouts: int = 0,
    lies: int = 0,
) -> Budget:
    """The budget left once these faults are spent; all of it gone once the total is."""
    total = b.total - (crashes + expiries + faults + timeouts + lies)
    if total == 0:
        return SPENT
    return Budget(
        b.crashes - crashes,
        b.expiries - expiries,
        b.faults - faults,
        b.timeouts - timeouts,
        total,
        b.lies - lies,
    )


def orphan(w: World, key: Key) -> World:
    """A request nobody waits for stays on the network, unless the provider already has it."""
    return w if key in w.ledger else w._replace(orphans=w.orphans | {key})


def clock_and_network(w: World, out: Successors) -> None:
    """Leases running out, the day turning, and late requests reaching the provider or
    getting lost."""
    for r, row in enumerate(w.rows):
        if not row.lease_live:
            continue
        holder = None if row.lease_owner is None else w.owners[row.lease_owner]
        working = (
            holder is not None
            and holder.phase in ACTIVE
            and holder.row == r
            and holder.generation == row.generation
        )
        if working and not w.budget.expiries:
            continue
        expired = row._replace(lease_owner=None, lease_live=False)
        after = with_row(w, r, expired)
        who = "its owner still works (paused or slow)" if working else "its holder is gone"
        text = f"lease on operation {r} expires; {who}"
        out.append((Step("clock", "lease expiry", None, text), spend(after, expiries=int(working))))
    for key in sorted(w.orphans):
        gone = w.orphans - {key}
        # A late request rejected as invalid leaves what one that never arrives leaves:
        # nothing, and the provider free to decide on the next (which it rejects as well).
        for verdict, known in deciding(w, key[1]):
            if verdict is Verdict.REJECT:
                continue
            what = "charges" if verdict is Verdict.APPROVE else "declines it"
            text = f"late request {key_name(key)} reaches provider {key[1]}: {what}"
            out.append(
                (
                    Step("network", "deliver", None, text),
                    known._replace(orphans=gone, ledger=w.ledger | {key}),
                )
            )
        text = f"request {key_name(key)} never reaches the provider (or is refused)"
        out.append((Step("network", "deliver", None, text), w._replace(orphans=gone)))
    if any(not row.earlier for row in w.rows):
        # Midnight: every row is in an earlier day's partition than a claim from now on.
        text = "midnight: the day turns; a new operation goes to the new day's partition"
        rows = tuple(row._replace(earlier=True) for row in w.rows)
        out.append((Step("clock", "day", None, text), w._replace(rows=rows)))
