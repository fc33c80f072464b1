"""Requests without a valid API key, limited per client address in each API process.

Every tenant route answers a missing, malformed or unknown key `401`; a key that has the
shape of ours (`keys.could_be_api_key`) but is not remembered costs a database lookup. So
each such request takes a token from its client address's bucket: up to `burst` at once,
`rate_per_s` more a second. With none left, the address is answered `429 RATE_LIMITED`
with `Retry-After` instead, before any lookup, until its bucket refills. A key that is found
gives its token back: a tenant's own requests never count here, and a key the process
remembers (`cache.py`) is accepted without asking this limiter at all.

The address is the connection's peer as uvicorn gives it: behind a proxy trusted through
`PAYMENTS_FORWARDED_ALLOW_IPS`, the client it forwards for; behind an untrusted one, the
proxy's own, which all its clients then share. `rate_per_s` 0 turns the limit off.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from app.tenants.errors import RateLimited
from app.tenants.rate_limit import RateLimiter

# A connection with no peer address (a Unix socket): one bucket for all of them.
NO_ADDRESS = ""


class UnauthenticatedLimiter:
    """Token buckets by client address for requests that are not (yet) a tenant's."""

    def __init__(
        self,
        *,
        rate_per_s: float,
        burst: int,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._buckets: RateLimiter[str] = RateLimiter(
            rate_per_s=rate_per_s, burst=burst, max_tenants=max_addresses, clock=clock
        )

    def take(self, address: str) -> None:
        """Count one request without a valid key from `address`; `RateLimited` when the
        address is over its rate (nothing else is done for the request then)."""
        wait_s = self._buckets.acquire(address)
        if wait_s is not None:
            raise RateLimited(
                f"too many requests without a valid API key from this address; "
                f"retry after {wait_s} s",
                headers={"retry-after": str(wait_s)},
            )

    def give_back(self, address: str) -> None:
        """The key `take` was counted for turned out valid: it does not count."""
        self._buckets.give_back(address)
