"""The owners' fenced writes, and what every rule needs to know about an owner.

Owner writes are exactly the repository's `UPDATE ... WHERE id = ? AND fence = ? AND
state = ?`: the owner names the state it believes the row is in and the trigger, and the
write lands only if both still hold. `Protocol` (protocol.py) is built on this, through the
attempts' rules (attempts.py).
"""

from __future__ import annotations

from tests.model.steps import DEST, Edge, Step, Successors
from tests.model.world import (
    DONE,
    IDLE,
    Bounds,
    Key,
    Mode,
    Mutation,
    Op,
    Owner,
    Phase,
    Result,
    Role,
    World,
    owner_names,
    roles,
    with_owner,
    with_row,
)


class Writes:
    """The writes an owner makes, under the service's rules or a mutation of them."""

    def __init__(self, bounds: Bounds, mutation: Mutation | None = None) -> None:
        self.bounds = bounds
        self.mutation = mutation
        self.roles = roles(bounds)
        self.names = owner_names(bounds)
        self._bump = 0 if mutation is Mutation.LEASE_WITHOUT_FENCE else 1

    def _mark_sent(self, w: World, i: int, o: Owner, trigger: str, out: Successors) -> None:
        then = Owner(
            Phase.SENDING,
            o.row,
            o.fence,
            o.generation,
            Op.PROVIDER_REQUEST_SENT,
            o.mode,
            Result.NONE,
            o.attempt,
        )
        out.append(self._write(w, i, o, "mark_sent", trigger, then, release=False))

    def _record(self, w: World, i: int, o: Owner, verb: str, trigger: str, out: Successors) -> None:
        # A completion stores the answer of the attempt it came from, and names that attempt.
        attempt = o.attempt if trigger == "complete" else None
        then = self._finished(i)
        out.append(self._write(w, i, o, verb, trigger, then, release=True, attempt=attempt))

    def _write(
        self,
        w: World,
        i: int,
        o: Owner,
        verb: str,
        trigger: str,
        then: Owner,
        *,
        release: bool,
        attempt: int | None = None,
    ) -> tuple[Step, World]:
        """`UPDATE ... WHERE id = ? AND fence = ? AND state = ?`, through the state machine.

        `attempt`, when given, is written to the row in the same statement.
        """
        dest = DEST[trigger]
        edge = Edge(trigger, o.believed, dest)
        row = w.rows[o.row]
        fence_ok = self.mutation is Mutation.UNFENCED_WRITE or row.fence == o.fence
        if not (fence_ok and row.state is o.believed):
            text = f"{o.believed.name}->{dest.name} fenced out: answers the current state"
            after = with_owner(w, i, self._finished(i))
            return Step(self.names[i], verb, trigger, text, edge, False), after
        # A recovery check that settles nothing counts, whoever makes it (worker or client).
        attempts = row.attempts + (trigger == "lose" and o.mode is Mode.RECOVER)
        # Recording an outcome releases the lease; mark_sent and failover renew it.
        owner, live = (None, False) if release else (row.lease_owner, True)
        new_attempt = row.attempt if attempt is None else attempt
        new_row = row._replace(
            state=dest, attempts=attempts, lease_owner=owner, lease_live=live, attempt=new_attempt
        )
        after = with_row(with_owner(w, i, then), o.row, new_row)
        if o.generation != row.generation and not w.stale_write:
            after = after._replace(stale_write=True)
        text = f"{o.believed.name}->{dest.name} at fence {o.fence}"
        if new_attempt != row.attempt:
            text += f", attempt {row.attempt}->{new_attempt}"
        return Step(self.names[i], verb, trigger, text, edge, True), after

    def key(self, o: Owner) -> Key:
        """The provider key owner `o` sends its charge with: its attempt's derived key."""
        if self.mutation is Mutation.RESEND_NEW_KEY and o.mode is Mode.RECOVER:
            return (o.row, o.attempt, o.fence)
        return (o.row, o.attempt, 0)

    def _finished(self, i: int) -> Owner:
        # The first request answers once; the operator acts once (its fence bumps would
        # otherwise grow the graph without bound); clients and workers come back.
        return DONE if self.roles[i] in (Role.FIRST_CLIENT, Role.OPERATOR) else IDLE
