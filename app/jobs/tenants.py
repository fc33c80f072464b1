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

Asked one at a time (`spread`), a claim of 32 over many tenants each due a little is up to 32
round trips. `spread_together` sends the tenants' claims together instead (a job's
`TenantClaims`: one pipeline, each still its own statement naming its tenant), and takes the
same of each tenant. The shares are worked out from what the tenants answered so far
(`_plan`): a tenant not yet asked is taken to fill its share, which leaves those after it
the least room, so each is asked at most its share; all of them are asked in one round
trip. A tenant that took less than that guess left more room to those after it: they are
asked the rest of their shares in the next round trip, and a tenant that took less than it
was asked is not asked again. With room for one each (more tenants than room), the first
round trip is the whole claim unless a tenant had nothing.

A claim that comes back short therefore means the tenants had no more due work when just
read (what the worker's loop takes it to mean, `app/jobs/loop.py`), never that a share was
small or the kept tenants were stale. It knows no table: each job hands it its own read of
the tenants and its own per-tenant claim.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
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
# Several tenants' claims sent together, one statement each (a pipeline: one round trip):
# [(tenant, at most this many), ...] -> what each took, in the same order.
TenantClaims = Callable[[Sequence[tuple[uuid.UUID, int]]], Awaitable[Sequence[Sequence[ItemT]]]]
# The tenants with due work now, read without a lock.
FindTenants = Callable[[], Awaitable[Sequence[uuid.UUID]]]
Shuffle = Callable[[list[uuid.UUID]], None]


@dataclass(frozen=True)
class Spread(Generic[ItemT]):
    """What a claim across tenants took, and the tenants that may have more (each took all
    it asked for the last time it was asked)."""

    items: list[ItemT]
    more: list[uuid.UUID]


@dataclass(frozen=True)
class _Plan:
    """The claim as far as the tenants' answers so far settle it: the tenants to ask next
    and how much more of each (none: settled), and the tenants that may have more."""

    asks: list[tuple[uuid.UUID, int]]
    more: list[uuid.UUID]


def _plan(
    order: list[uuid.UUID], limit: int, asked: Counter[uuid.UUID], took: Counter[uuid.UUID]
) -> _Plan:
    """The claim tenant by tenant (shares, first pass, the room left to those that filled
    theirs), answered from what each tenant was asked in all (`asked`) and took (`took`).

    A tenant answers a share from that when it already took this much in all, or took less
    than it was asked (it had no more); else the share is to be asked, and until it is, is
    taken to be filled. That guess is the most a tenant can take, so it leaves the tenants
    after it the least room: every share it makes them ask is at most what they will be
    asked once the answer is known, and nothing is asked that the claim would not ask.
    """
    wanted: Counter[uuid.UUID] = Counter()  # asked of each in all, as far as this goes
    had: Counter[uuid.UUID] = Counter()  # and taken
    asks: dict[uuid.UUID, None] = {}

    def take(tenant: uuid.UUID, share: int) -> int:
        wanted[tenant] += share
        if took[tenant] < asked[tenant] or wanted[tenant] <= asked[tenant]:
            got = min(share, took[tenant] - had[tenant])
        else:
            asks[tenant] = None
            got = share
        had[tenant] += got
        return got

    def settled(more: list[uuid.UUID]) -> _Plan:
        return _Plan([(t, wanted[t] - asked[t]) for t in asks], more)

    taken = 0
    filled: list[uuid.UUID] = []
    for i, tenant in enumerate(order):
        room = limit - taken
        if room <= 0:
            # Not asked: as far as this claim knows, they still have their due work.
            return settled([*filled, *order[i:]])
        share = -(-room // (len(order) - i))
        got = take(tenant, share)
        taken += got
        if got >= share:
            filled.append(tenant)
    more: list[uuid.UUID] = []
    for j, tenant in enumerate(filled):
        room = limit - taken
        if room <= 0:
            return settled([*more, *filled[j:]])
        got = take(tenant, room)
        taken += got
        if got >= room:
            more.append(tenant)
    return settled(more)


async def _spread(
    tenants: Sequence[uuid.UUID],
    limit: int,
    claims: TenantClaims[ItemT],
    *,
    together: bool,
    shuffle: Shuffle,
) -> Spread[ItemT]:
    order = list(dict.fromkeys(tenants))
    shuffle(order)
    asked: Counter[uuid.UUID] = Counter()
    took: Counter[uuid.UUID] = Counter()
    items: list[ItemT] = []
    while True:
        plan = _plan(order, limit, asked, took)
        if not plan.asks:
            return Spread(items, plan.more)
        # The first ask is the claim's next, whatever the others answer: one at a time,
        # the tenants are asked exactly what the claim asks, in its order.
        asks = plan.asks if together else plan.asks[:1]
        for (tenant, n), got in zip(asks, await claims(asks), strict=True):
            asked[tenant] += n
            took[tenant] += len(got)
            items.extend(got)


async def spread(
    tenants: Sequence[uuid.UUID],
    limit: int,
    claim: TenantClaim[ItemT],
    *,
    shuffle: Shuffle = random.shuffle,
) -> Spread[ItemT]:
    """Up to `limit` items claimed across `tenants`, one `claim` per tenant (twice for one
    that filled its share while room was left), in an order `shuffle` decides."""

    async def one(asks: Sequence[tuple[uuid.UUID, int]]) -> list[Sequence[ItemT]]:
        [(tenant, n)] = asks
        return [await claim(tenant, n)]

    return await _spread(tenants, limit, one, together=False, shuffle=shuffle)


async def spread_together(
    tenants: Sequence[uuid.UUID],
    limit: int,
    claims: TenantClaims[ItemT],
    *,
    shuffle: Shuffle = random.shuffle,
) -> Spread[ItemT]:
    """What `spread` takes, the tenants' claims sent together (`claims`) instead of one at
    a time: every tenant whose share is known as far as the answers so far go is asked at
    once, each still one statement of its own."""
    return await _spread(tenants, limit, claims, together=True, shuffle=shuffle)


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
        enough, else from the tenants `find` reads now; one tenant's `claim` at a time."""

        async def one_at_a_time(tenants: Sequence[uuid.UUID], room: int) -> Spread[ItemT]:
            return await spread(tenants, room, claim, shuffle=self._shuffle)

        return await self._claim(limit, find, one_at_a_time)

    async def claim_together(
        self, limit: int, find: FindTenants, claims: TenantClaims[ItemT]
    ) -> list[ItemT]:
        """What `claim` takes, the tenants' claims sent together (`spread_together`)."""

        async def together(tenants: Sequence[uuid.UUID], room: int) -> Spread[ItemT]:
            return await spread_together(tenants, room, claims, shuffle=self._shuffle)

        return await self._claim(limit, find, together)

    async def _claim(
        self,
        limit: int,
        find: FindTenants,
        spread_over: Callable[[Sequence[uuid.UUID], int], Awaitable[Spread[ItemT]]],
    ) -> list[ItemT]:
        fresh = not self._kept or self._stale()
        tenants = await self._read(find) if fresh else self._kept
        first = await spread_over(tenants, limit)
        taken, more = first.items, first.more
        if len(taken) < limit and not fresh:
            # The kept tenants ran dry: read them again; the room left goes to whoever has
            # due work now.
            again = await spread_over(await self._read(find), limit - len(taken))
            taken = [*taken, *again.items]
            more = list(dict.fromkeys([*more, *again.more]))
        self._kept = more
        return taken

    def _stale(self) -> bool:
        return self._read_at is None or self._clock() - self._read_at >= self._refresh_s

    async def _read(self, find: FindTenants) -> Sequence[uuid.UUID]:
        self._read_at = self._clock()
        return await find()
