"""A claim spread over tenants: one statement per tenant, fair shares, shuffled each time.

A claim that locks rows (`FOR UPDATE SKIP LOCKED`) and bumps their fence is one tenant's
statement here, as the service's every write is: on Citus a statement that locks rows must
route to one shard group, and `tenant_id` is the distribution column (docs/scaling.md). So a
job that claims across tenants finds the tenants with due work (a plain read, no locks),
then claims for each of them in turn. This module holds what is the same for any such job:
in which order, how much each tenant may take, and when to read the tenants again.

- The order is shuffled on every claim, so no tenant is always first (or last) in line.
- Each tenant's share is the claim's room left, divided by the tenants still to come
  (rounded up): a tenant with little due work leaves its unused share to the next, so one
  pass over the tenants fills the claim whenever they have enough between them.
- A tenant that took its whole share may have more: once every tenant had its turn, those
  are asked again, in the same order, for whatever room is left (`spread`).
- The tenants found are kept between claims (`KeptTenants`): the next claim goes straight
  to those that may have more, without reading them again. Reading them is a round trip of
  its own, and a worker draining a backlog claims every few items: the read doubled each
  claim's wait, during which its window ran dry (one worker's drain, 20 % slower; the
  numbers are in docs/benchmark.md). They are read again once the kept ones run dry, and at
  the latest `refresh_s` after the last read, so a tenant whose work falls due meanwhile
  waits no longer than that for its share.

A claim that comes back short therefore means the tenants had no more due work when just
read (what the worker's loop takes it to mean, `app/jobs/loop.py`), never that a share was
small or the kept tenants were stale. It knows no table: each job hands it its own read of
the tenants and its own per-tenant claim.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

ItemT = TypeVar("ItemT")

# How long the tenants found with due work serve a worker's claims before they are read
# again (sooner once they run dry): the longest a tenant whose work falls due while the
# worker drains others waits for its share. The recovery's, the hold expiry's and the
# webhook deliveries' claims keep them this long.
KEEP_TENANTS_S = 1.0

# One tenant's claim: (tenant, at most this many) -> what it took.
TenantClaim = Callable[[uuid.UUID, int], Awaitable[Sequence[ItemT]]]
# The tenants with due work now, read without a lock.
FindTenants = Callable[[], Awaitable[Sequence[uuid.UUID]]]
Shuffle = Callable[[list[uuid.UUID]], None]


@dataclass(frozen=True)
class Spread(Generic[ItemT]):
    """What a claim across tenants took, and the tenants that may have more (each took all
    it asked for the last time it was asked)."""

    items: list[ItemT]
    more: list[uuid.UUID]


async def spread(
    tenants: Sequence[uuid.UUID],
    limit: int,
    claim: TenantClaim[ItemT],
    *,
    shuffle: Shuffle = random.shuffle,
) -> Spread[ItemT]:
    """Up to `limit` items claimed across `tenants`, one `claim` per tenant (twice for one
    that filled its share while room was left), in an order `shuffle` decides."""
    order = list(dict.fromkeys(tenants))
    shuffle(order)
    taken: list[ItemT] = []
    filled: list[uuid.UUID] = []
    for i, tenant in enumerate(order):
        room = limit - len(taken)
        if room <= 0:
            # Not asked: as far as this claim knows, they still have their due work.
            return Spread(taken, [*filled, *order[i:]])
        share = -(-room // (len(order) - i))
        got = await claim(tenant, share)
        taken.extend(got)
        if len(got) >= share:
            filled.append(tenant)
    more: list[uuid.UUID] = []
    for j, tenant in enumerate(filled):
        room = limit - len(taken)
        if room <= 0:
            return Spread(taken, [*more, *filled[j:]])
        got = await claim(tenant, room)
        taken.extend(got)
        if len(got) >= room:
            more.append(tenant)
    return Spread(taken, more)


class KeptTenants:
    """A job's claims across tenants, with the tenants it found kept between claims.

    One instance per job of one worker: the worker's loop never runs two claims of a job at
    once. `refresh_s` 0 reads the tenants on every claim.
    """

    def __init__(
        self,
        *,
        refresh_s: float,
        shuffle: Shuffle = random.shuffle,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._refresh_s = refresh_s
        self._shuffle = shuffle
        self._clock = clock
        self._kept: list[uuid.UUID] = []
        self._read_at: float | None = None

    async def claim(self, limit: int, find: FindTenants, claim: TenantClaim[ItemT]) -> list[ItemT]:
        """Up to `limit` items: from the kept tenants while they last and are recent
        enough, else from the tenants `find` reads now."""
        fresh = not self._kept or self._stale()
        tenants = await self._read(find) if fresh else self._kept
        first = await spread(tenants, limit, claim, shuffle=self._shuffle)
        taken, more = first.items, first.more
        if len(taken) < limit and not fresh:
            # The kept tenants ran dry: read them again; the room left goes to whoever has
            # due work now.
            again = await spread(
                await self._read(find), limit - len(taken), claim, shuffle=self._shuffle
            )
            taken = [*taken, *again.items]
            more = list(dict.fromkeys([*more, *again.more]))
        self._kept = more
        return taken

    def _stale(self) -> bool:
        return self._read_at is None or self._clock() - self._read_at >= self._refresh_s

    async def _read(self, find: FindTenants) -> Sequence[uuid.UUID]:
        self._read_at = self._clock()
        return await find()
