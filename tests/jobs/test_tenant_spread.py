"""A claim spread over tenants (`app/jobs/tenants.py`), in memory: how much each tenant's
claim may take, in which order, when a tenant is asked twice, and when the tenants are read
again.

Each tenant here has a number of items due; a tenant's claim takes up to its share of them.
The order is the test's own (`shuffle`), and so is the clock, so every expectation is exact.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from collections.abc import Sequence

from app.jobs.tenants import KeptTenants, Shuffle, spread, spread_together

A, B, C = (uuid.UUID(int=n) for n in (1, 2, 3))


class Backlogs:
    """Items due per tenant; records every claim as (tenant, share, taken)."""

    def __init__(self, due: dict[uuid.UUID, int]):
        self.due = dict(due)
        self.claims: list[tuple[uuid.UUID, int, int]] = []
        self.rounds: list[list[tuple[uuid.UUID, int]]] = []

    async def claim(self, tenant: uuid.UUID, share: int) -> Sequence[uuid.UUID]:
        taken = min(share, self.due.get(tenant, 0))
        self.due[tenant] = self.due.get(tenant, 0) - taken
        self.claims.append((tenant, share, taken))
        return [tenant] * taken

    async def claim_together(
        self, asks: Sequence[tuple[uuid.UUID, int]]
    ) -> list[Sequence[uuid.UUID]]:
        """The tenants' claims sent together: one round trip, recorded as `rounds`."""
        self.rounds.append([(tenant, share) for tenant, share in asks])
        return [await self.claim(tenant, share) for tenant, share in asks]


def _in_order(*order: uuid.UUID) -> Shuffle:
    def shuffle(tenants: list[uuid.UUID]) -> None:
        tenants.sort(key=order.index)

    return shuffle


def _spread(
    backlogs: Backlogs, tenants: list[uuid.UUID], limit: int, *order: uuid.UUID
) -> list[uuid.UUID]:
    return asyncio.run(spread(tenants, limit, backlogs.claim, shuffle=_in_order(*order))).items


def test_each_tenant_takes_a_fair_share_and_leaves_what_it_does_not_use_to_the_next() -> None:
    backlogs = Backlogs({A: 100, B: 1, C: 100})
    taken = _spread(backlogs, [A, B, C], 12, B, A, C)
    # B takes its one of 4; A then gets half the 11 left (6), C the rest (5).
    assert backlogs.claims == [(B, 4, 1), (A, 6, 6), (C, 5, 5)]
    assert len(taken) == 12


def test_a_tenant_with_a_small_backlog_is_served_whatever_a_large_one_holds() -> None:
    backlogs = Backlogs({A: 1_000, B: 2})
    taken = _spread(backlogs, [A, B], 10, A, B)
    assert taken.count(B) == 2
    assert taken.count(A) == 8


def test_a_tenant_that_filled_its_share_is_asked_again_for_the_room_left() -> None:
    # A first: its share is 5 of 10; B has only 1; A is asked again for the 4 left, so the
    # claim comes back full (a short one would tell the loop nothing more is due).
    backlogs = Backlogs({A: 100, B: 1})
    taken = _spread(backlogs, [A, B], 10, A, B)
    assert backlogs.claims == [(A, 5, 5), (B, 5, 1), (A, 4, 4)]
    assert len(taken) == 10


def test_a_short_claim_means_the_tenants_had_no_more() -> None:
    backlogs = Backlogs({A: 3, B: 2})
    assert len(_spread(backlogs, [A, B], 10, A, B)) == 5
    assert backlogs.due == {A: 0, B: 0}


def test_no_claim_takes_more_than_the_limit_and_no_tenant_is_asked_once_it_is_full() -> None:
    backlogs = Backlogs({A: 5, B: 5, C: 5})
    taken = _spread(backlogs, [A, B, C, A], 2, C, A, B)
    # Three tenants (A named twice counts once), room for two: shares of 1, 1, then none.
    assert backlogs.claims == [(C, 1, 1), (A, 1, 1)]
    assert len(taken) == 2


def test_the_order_is_shuffled_on_every_claim() -> None:
    firsts = set()
    for _ in range(50):
        backlogs = Backlogs({A: 10, B: 10, C: 10})
        asyncio.run(spread([A, B, C], 3, backlogs.claim))
        firsts.add(backlogs.claims[0][0])
    assert firsts == {A, B, C}


def test_no_tenant_no_claim() -> None:
    backlogs = Backlogs({})
    assert _spread(backlogs, [], 10) == []
    assert backlogs.claims == []


def test_the_tenants_that_may_have_more_are_those_that_took_all_they_asked_for() -> None:
    backlogs = Backlogs({A: 100, B: 1, C: 100})
    result = asyncio.run(spread([A, B, C], 12, backlogs.claim, shuffle=_in_order(B, A, C)))
    assert result.more == [A, C]
    # Room for one only: C is never asked, and may have more as far as anyone knows.
    backlogs = Backlogs({A: 100, B: 100, C: 100})
    result = asyncio.run(spread([A, B, C], 1, backlogs.claim, shuffle=_in_order(A, B, C)))
    assert (len(result.items), result.more) == (1, [A, B, C])


def _together(
    backlogs: Backlogs, tenants: list[uuid.UUID], limit: int, *order: uuid.UUID
) -> list[uuid.UUID]:
    return asyncio.run(
        spread_together(tenants, limit, backlogs.claim_together, shuffle=_in_order(*order))
    ).items


def test_together_every_tenant_whose_share_is_known_is_asked_in_one_round_trip() -> None:
    # 32 tenants, room for 32: a share of one each, all asked at once (one at a time, that
    # is 32 round trips).
    tenants = [uuid.UUID(int=n) for n in range(1, 33)]
    backlogs = Backlogs(dict.fromkeys(tenants, 3))
    taken = _together(backlogs, tenants, 32, *tenants)
    assert backlogs.rounds == [[(t, 1) for t in tenants]]
    assert sorted(taken) == tenants


def test_together_a_share_left_unused_is_asked_of_the_next_tenants_in_another_round() -> None:
    backlogs = Backlogs({A: 100, B: 1, C: 100})
    taken = _together(backlogs, [A, B, C], 12, B, A, C)
    # Asked together, each as if those before filled theirs: 4 each. B took 1, so A's share
    # was 6 and C's 5: they are asked the rest, again together.
    assert backlogs.rounds == [[(B, 4), (A, 4), (C, 4)], [(A, 2), (C, 1)]]
    assert Counter(taken) == {A: 6, B: 1, C: 5}


def test_together_a_tenant_that_took_less_than_it_was_asked_is_not_asked_again() -> None:
    backlogs = Backlogs({A: 1, B: 1, C: 100})
    taken = _together(backlogs, [A, B, C], 12, A, B, C)
    # A took 1 of 4, so B's share was 6: B is not asked for 2 more, it had only 1 of 4.
    assert backlogs.rounds == [[(A, 4), (B, 4), (C, 4)], [(C, 6)]]
    assert Counter(taken) == {A: 1, B: 1, C: 10}


def test_together_a_tenant_that_filled_its_share_is_asked_again_for_the_room_left() -> None:
    backlogs = Backlogs({A: 100, B: 1})
    taken = _together(backlogs, [A, B], 10, A, B)
    assert backlogs.rounds == [[(A, 5), (B, 5)], [(A, 4)]]
    assert len(taken) == 10


def _one_at_a_time(
    due: dict[uuid.UUID, int], limit: int, order: list[uuid.UUID]
) -> tuple[Counter[uuid.UUID], list[uuid.UUID], int]:
    backlogs = Backlogs(due)
    result = asyncio.run(spread(list(due), limit, backlogs.claim, shuffle=_in_order(*order)))
    return Counter(result.items), result.more, len(backlogs.claims)


def test_together_takes_what_one_at_a_time_takes_of_each_tenant() -> None:
    # The same shares, whatever the backlogs: tenants with nothing, a little, more than a
    # share; fewer and more tenants than the room.
    rng = random.Random(20261127)
    for _ in range(500):
        tenants = [uuid.UUID(int=n) for n in range(1, rng.randint(1, 40))]
        due = {t: rng.choice([0, 0, 1, 1, 2, 3, 5, 8, 40]) for t in tenants}
        limit = rng.randint(1, 40)
        order = rng.sample(tenants, len(tenants))
        backlogs = Backlogs(due)
        result = asyncio.run(
            spread_together(tenants, limit, backlogs.claim_together, shuffle=_in_order(*order))
        )
        items, more, round_trips = _one_at_a_time(due, limit, order)
        assert (Counter(result.items), result.more) == (items, more), (due, limit, order)
        # Never more round trips than one at a time, and each tenant once in a round trip
        # at most (its share and the room left asked together when neither is known).
        assert len(backlogs.rounds) <= round_trips
        assert all(len({t for t, _ in r}) == len(r) for r in backlogs.rounds)


class Reads:
    """The tenants with due work, read from `Backlogs`; counts the reads."""

    def __init__(self, backlogs: Backlogs):
        self.backlogs = backlogs
        self.count = 0

    async def find(self) -> list[uuid.UUID]:
        self.count += 1
        return [t for t, n in self.backlogs.due.items() if n > 0]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_kept_tenants_spare_a_read_while_they_have_work_and_are_recent() -> None:
    backlogs, clock = Backlogs({A: 100}), Clock()
    reads = Reads(backlogs)
    kept = KeptTenants(refresh_s=1.0, clock=clock, shuffle=_in_order(A, B))

    def claim() -> int:
        return len(asyncio.run(kept.claim(16, reads.find, backlogs.claim)))

    assert (claim(), claim(), reads.count) == (16, 16, 1)
    # B's work falls due: not seen while A's kept work is less than a second old ...
    backlogs.due[B] = 5
    clock.now = 0.5
    assert (claim(), reads.count, backlogs.due[B]) == (16, 1, 5)
    # ... and served at the next claim after that.
    clock.now = 1.0
    assert (claim(), reads.count, backlogs.due[B]) == (16, 2, 0)


def test_a_short_claim_from_kept_tenants_reads_them_again_before_it_answers() -> None:
    # A short claim tells the loop nothing more is due: it must not rest on kept tenants
    # that ran dry while another has work.
    backlogs = Backlogs({A: 20})
    reads = Reads(backlogs)
    kept = KeptTenants(refresh_s=60.0, clock=Clock())
    assert len(asyncio.run(kept.claim(16, reads.find, backlogs.claim))) == 16
    backlogs.due[B] = 30
    assert len(asyncio.run(kept.claim(16, reads.find, backlogs.claim))) == 16
    assert reads.count == 2
    assert backlogs.due == {A: 0, B: 18}


def test_without_keeping_the_tenants_are_read_on_every_claim() -> None:
    backlogs = Backlogs({A: 100})
    reads = Reads(backlogs)
    kept = KeptTenants(refresh_s=0, clock=Clock())
    for _ in range(3):
        asyncio.run(kept.claim(16, reads.find, backlogs.claim))
    assert reads.count == 3
