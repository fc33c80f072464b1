"""The rate limiter's table of buckets at its bound, and its arithmetic at the edges.

`test_rate_limit.py` shows the bucket's behaviour; these pin what makes the table safe to
keep in every API process: how many buckets go when it is full (the idle full ones first,
then the longest unused tenth, never every one), at the default bound and at bounds past
256 (where an identity test of two counts would no longer be an equality), and a clock
that steps back or an exact refill.
"""

from __future__ import annotations

import uuid

from app.tenants.rate_limit import TenantRateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _busy_table(clock: Clock, limiter: TenantRateLimiter, count: int) -> list[uuid.UUID]:
    """`count` tenants, each with an empty bucket, the first one the longest unused."""
    tenants = [uuid.uuid4() for _ in range(count)]
    for tenant in tenants:
        clock.now += 0.001
        assert limiter.acquire(tenant) is None
    return tenants


def test_a_full_table_of_busy_tenants_forgets_the_longest_unused_tenth() -> None:
    clock = Clock()
    limiter = TenantRateLimiter(rate_per_s=0.01, burst=1, max_tenants=300, clock=clock)
    tenants = _busy_table(clock, limiter, 300)
    assert len(limiter._buckets) == 300
    newcomer = uuid.uuid4()
    clock.now += 0.001
    assert limiter.acquire(newcomer) is None
    # 300 // 10 = 30 go, the 30 used longest ago; the newcomer takes a bucket.
    assert len(limiter._buckets) == 271
    assert set(limiter._buckets) == {*tenants[30:], newcomer}
    # A forgotten tenant starts again with a full bucket; a kept one is still refused.
    assert limiter.acquire(tenants[0]) is None
    assert limiter.acquire(tenants[-1]) is not None


def test_a_table_below_its_bound_forgets_nobody() -> None:
    clock = Clock()
    limiter = TenantRateLimiter(rate_per_s=0.01, burst=1, max_tenants=300, clock=clock)
    tenants = _busy_table(clock, limiter, 299)
    clock.now += 0.001
    limiter.acquire(uuid.uuid4())
    assert len(limiter._buckets) == 300
    assert set(tenants) <= set(limiter._buckets)


def test_a_table_below_its_bound_keeps_even_its_refilled_buckets() -> None:
    # Below the bound nothing is scanned or dropped: a new tenant costs no walk of the table.
    clock = Clock()
    limiter = TenantRateLimiter(rate_per_s=1.0, burst=1, max_tenants=300, clock=clock)
    idle = _busy_table(clock, limiter, 10)
    clock.now += 3600.0
    limiter.acquire(uuid.uuid4())
    assert set(idle) <= set(limiter._buckets)
    assert len(limiter._buckets) == 11


def test_a_table_of_25_forgets_two_and_one_of_9_forgets_one() -> None:
    for bound, forgotten in ((25, 2), (9, 1)):
        clock = Clock()
        limiter = TenantRateLimiter(rate_per_s=0.01, burst=1, max_tenants=bound, clock=clock)
        tenants = _busy_table(clock, limiter, bound)
        newcomer = uuid.uuid4()
        limiter.acquire(newcomer)
        assert set(limiter._buckets) == {*tenants[forgotten:], newcomer}


def test_the_default_bound_is_ten_thousand_tenants() -> None:
    clock = Clock()
    limiter = TenantRateLimiter(rate_per_s=0.001, burst=1, clock=clock)
    _busy_table(clock, limiter, 10_000)
    assert len(limiter._buckets) == 10_000
    limiter.acquire(uuid.uuid4())
    assert len(limiter._buckets) == 9_001


def test_a_bucket_idle_for_exactly_its_refill_time_is_full_and_goes_first() -> None:
    clock = Clock()
    # Refilled from empty in burst / rate = 2 s.
    limiter = TenantRateLimiter(rate_per_s=1.0, burst=2, max_tenants=300, clock=clock)
    tenants = _busy_table(clock, limiter, 300)
    refilled, almost = tenants[-1], tenants[-2]
    clock.now = 2000.0  # times a float holds exactly
    for tenant in tenants[:-2]:
        limiter._buckets[tenant].at = clock.now
    limiter._buckets[refilled].at = 1998.0
    limiter._buckets[almost].at = 1998.5
    newcomer = uuid.uuid4()
    limiter.acquire(newcomer)
    # Only the refilled bucket went: nobody else was idle long enough, and the table is
    # below its bound again, so no tenth is forgotten.
    assert refilled not in limiter._buckets
    assert len(limiter._buckets) == 300
    assert almost in limiter._buckets


def test_a_clock_that_steps_back_adds_no_token_and_takes_none() -> None:
    clock = Clock()
    limiter = TenantRateLimiter(rate_per_s=1.0, burst=2, clock=clock)
    tenant = uuid.uuid4()
    assert limiter.acquire(tenant) is None
    clock.now -= 50.0
    assert limiter.acquire(tenant) is None
    assert limiter.acquire(tenant) == 1
    # The bucket's time moved back with the clock: one second later, one token.
    clock.now += 1.0
    assert limiter.acquire(tenant) is None


def test_the_wait_is_what_the_missing_part_of_a_token_takes_rounded_up() -> None:
    clock = Clock()
    limiter = TenantRateLimiter(rate_per_s=0.1, burst=1, clock=clock)
    tenant = uuid.uuid4()
    assert limiter.acquire(tenant) is None
    assert limiter.acquire(tenant) == 10
    clock.now += 3.0  # 0.3 of a token: 7 s to go
    assert limiter.acquire(tenant) == 7
    clock.now += 6.5  # 0.95: 0.5 s, rounded up to 1
    assert limiter.acquire(tenant) == 1
    clock.now += 0.5
    assert limiter.acquire(tenant) is None


def test_the_limit_is_on_for_any_rate_above_zero() -> None:
    assert TenantRateLimiter(rate_per_s=0.001, burst=1).enabled
    assert not TenantRateLimiter(rate_per_s=0, burst=1).enabled
    assert TenantRateLimiter(rate_per_s=0, burst=1).acquire(uuid.uuid4()) is None
    # A burst of one is allowed.
    assert TenantRateLimiter(rate_per_s=1, burst=1).acquire(uuid.uuid4()) is None


def test_a_token_given_back_is_there_for_the_next_request_up_to_the_burst() -> None:
    clock = Clock()
    limiter = TenantRateLimiter(rate_per_s=0.01, burst=2, clock=clock)
    tenant = uuid.uuid4()
    assert [limiter.acquire(tenant) for _ in range(2)] == [None, None]
    limiter.give_back(tenant)
    assert limiter.acquire(tenant) is None
    assert limiter.acquire(tenant) == 100
    # Never past the burst, and nothing for a key it holds no bucket for.
    limiter.give_back(tenant)
    limiter.give_back(tenant)
    limiter.give_back(tenant)
    assert [limiter.acquire(tenant) for _ in range(3)] == [None, None, 100]
    stranger = uuid.uuid4()
    limiter.give_back(stranger)
    assert stranger not in limiter._buckets
