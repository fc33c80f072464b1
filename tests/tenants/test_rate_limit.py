"""The per-tenant token bucket: a burst, then one request per 1/rate seconds."""

from __future__ import annotations

import uuid

import pytest

from app.tenants.rate_limit import TenantRateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _limiter(
    clock: Clock, *, rate: float = 2.0, burst: int = 3, **kwargs: int
) -> TenantRateLimiter:
    return TenantRateLimiter(rate_per_s=rate, burst=burst, clock=clock, **kwargs)


def test_a_burst_then_refused_with_whole_seconds_to_wait() -> None:
    clock = Clock()
    limiter = _limiter(clock, rate=0.25, burst=3)
    tenant = uuid.uuid4()
    assert [limiter.acquire(tenant) for _ in range(3)] == [None, None, None]
    # One token every 4 s.
    assert limiter.acquire(tenant) == 4
    clock.now += 2.5
    assert limiter.acquire(tenant) == 2  # 1.5 s left, rounded up
    clock.now += 1.5
    assert limiter.acquire(tenant) is None
    assert limiter.acquire(tenant) == 4


def test_the_wait_is_never_below_one_second() -> None:
    clock = Clock()
    limiter = _limiter(clock, rate=50.0, burst=1)
    tenant = uuid.uuid4()
    assert limiter.acquire(tenant) is None
    assert limiter.acquire(tenant) == 1


def test_a_refused_request_takes_no_token() -> None:
    clock = Clock()
    limiter = _limiter(clock, rate=1.0, burst=1)
    tenant = uuid.uuid4()
    assert limiter.acquire(tenant) is None
    for _ in range(100):
        assert limiter.acquire(tenant) == 1
    clock.now += 1.0
    assert limiter.acquire(tenant) is None


def test_the_bucket_refills_up_to_the_burst_only() -> None:
    clock = Clock()
    limiter = _limiter(clock, rate=10.0, burst=2)
    tenant = uuid.uuid4()
    assert limiter.acquire(tenant) is None
    clock.now += 3600
    assert [limiter.acquire(tenant) for _ in range(3)] == [None, None, 1]


def test_tenants_have_buckets_of_their_own() -> None:
    clock = Clock()
    limiter = _limiter(clock, rate=1.0, burst=1)
    busy, other = uuid.uuid4(), uuid.uuid4()
    assert limiter.acquire(busy) is None
    assert limiter.acquire(busy) == 1
    assert limiter.acquire(other) is None


def test_zero_turns_the_limit_off() -> None:
    limiter = _limiter(Clock(), rate=0.0, burst=1)
    tenant = uuid.uuid4()
    assert not limiter.enabled
    assert all(limiter.acquire(tenant) is None for _ in range(10_000))


def test_the_table_is_bounded_and_keeps_a_busy_tenant() -> None:
    clock = Clock()
    limiter = _limiter(clock, rate=1.0, burst=1, max_tenants=10)
    throttled = uuid.uuid4()
    for _ in range(50):
        clock.now += 0.01
        limiter.acquire(throttled)
        limiter.acquire(uuid.uuid4())
        assert len(limiter._buckets) <= 10
    # Busy all along, it is never the one forgotten: still refused.
    assert limiter.acquire(throttled) == 1


def test_idle_full_buckets_go_first() -> None:
    clock = Clock()
    limiter = _limiter(clock, rate=1.0, burst=1, max_tenants=3)
    idle = [uuid.uuid4(), uuid.uuid4()]
    for tenant in idle:
        limiter.acquire(tenant)
    clock.now += 10  # both refilled
    busy = uuid.uuid4()
    limiter.acquire(busy)
    newcomer = uuid.uuid4()
    limiter.acquire(newcomer)
    assert set(limiter._buckets) == {busy, newcomer}
    assert limiter.acquire(busy) == 1


@pytest.mark.parametrize(("rate", "burst", "message"), [(-1.0, 1, "rate_per_s"), (1.0, 0, "burst")])
def test_bad_parameters_are_refused(rate: float, burst: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TenantRateLimiter(rate_per_s=rate, burst=burst)
