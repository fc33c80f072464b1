"""Each tenant's request rate, limited by a token bucket in each API process.

A tenant's bucket holds up to `burst` tokens and gains `rate_per_s` a second; every
authenticated request takes one. With none left, the request is refused (`429
RATE_LIMITED`) and told when a token will be there (`Retry-After`, whole seconds, at least
1). The buckets live in the process: with N API processes behind a balancer a tenant may
make up to N times the rate in all, so size the setting to one process's share.

The table is bounded. Past `max_tenants`, buckets that have refilled (they hold nothing a
fresh bucket would not) go first, then the longest unused tenth: a forgotten tenant starts again
with a full bucket, which is the most it could have had anyway once idle for `burst /
rate_per_s` seconds.

The same buckets, keyed by client address, limit requests without a valid API key
(`unauthenticated.py`): `RateLimiter` takes any key.
"""

from __future__ import annotations

import heapq
import math
import time
import uuid
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at


class RateLimiter(Generic[K]):
    """Token buckets by key (a tenant's id, a client's address); `rate_per_s` 0 turns the
    limit off."""

    def __init__(
        self,
        *,
        rate_per_s: float,
        burst: int,
        max_tenants: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate_per_s < 0:
            raise ValueError("rate_per_s must not be negative")
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self._rate = float(rate_per_s)
        self._burst = float(burst)
        self._max_tenants = max_tenants
        self._clock = clock
        self._buckets: dict[K, _Bucket] = {}

    @property
    def enabled(self) -> bool:
        return self._rate > 0

    def acquire(self, key: K) -> int | None:
        """Take a token for one request: None if allowed, else whole seconds to wait (>= 1)."""
        if self._rate <= 0:
            return None
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            self._make_room(now)
            bucket = self._buckets[key] = _Bucket(self._burst, now)
        else:
            elapsed = max(0.0, now - bucket.at)
            bucket.tokens = min(self._burst, bucket.tokens + elapsed * self._rate)
            bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return max(1, math.ceil((1.0 - bucket.tokens) / self._rate))

    def give_back(self, key: K) -> None:
        """Return the token the last `acquire` for `key` took (the request turned out not to
        count)."""
        bucket = self._buckets.get(key)
        if bucket is not None:
            bucket.tokens = min(self._burst, bucket.tokens + 1.0)

    def _make_room(self, now: float) -> None:
        if len(self._buckets) < self._max_tenants:
            return
        refill_s = self._burst / self._rate
        full = [t for t, b in self._buckets.items() if now - b.at >= refill_s]
        for key in full:
            del self._buckets[key]
        if len(self._buckets) >= self._max_tenants:
            # All in use: the longest unused tenth goes, so this is not paid per new tenant.
            count = len(self._buckets) - self._max_tenants + max(1, self._max_tenants // 10)
            at = {t: b.at for t, b in self._buckets.items()}
            for key in heapq.nsmallest(count, at, key=at.__getitem__):
                del self._buckets[key]


# The tenants' limiter: buckets by tenant id (`bearer.py`).
TenantRateLimiter = RateLimiter[uuid.UUID]
