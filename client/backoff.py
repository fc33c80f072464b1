"""How long to wait before trying again, and whether to try again at all.

Pure arithmetic plus one small piece of state, all with an injectable clock, so the sync and
async clients share it and tests can drive it without sleeping:

- `full_jitter`: capped exponential backoff with full jitter; the next wait is drawn
  uniformly from [0, min(cap, base * 2**n)], which spreads out clients that failed together.
- `parse_retry_after`: the server's `Retry-After` (seconds or an HTTP date).
- `RetryBudget`: a token bucket shared by every call of one client. Each retry after a
  failure spends a token and tokens come back at a steady rate, so when the API is failing a
  busy client slows to that rate instead of multiplying the load with its retries.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

#: A monotonic clock in seconds.
Clock = Callable[[], float]


@dataclass(frozen=True)
class Backoff:
    """The shape of the waits between attempts."""

    #: The first ceiling; it doubles after every retry.
    base_s: float = 0.5
    #: The largest ceiling: no self-chosen wait is ever longer (`Retry-After` may be).
    cap_s: float = 30.0
    #: The shortest wait between two polls of an operation whose outcome is still open.
    min_poll_s: float = 1.0

    def __post_init__(self) -> None:
        if self.base_s <= 0 or self.cap_s < self.base_s or self.min_poll_s < 0:
            raise ValueError("backoff needs 0 < base_s <= cap_s and min_poll_s >= 0")


def full_jitter(retry: int, *, base_s: float, cap_s: float, rng: random.Random) -> float:
    """The wait before retry number `retry + 1`: uniform in [0, min(cap_s, base_s * 2**retry)]."""
    ceiling = min(cap_s, base_s * (2 ** min(max(retry, 0), 62)))
    return rng.uniform(0.0, ceiling)


def parse_retry_after(
    value: str | None, *, date: str | None = None, now: float | None = None
) -> float | None:
    """Seconds to wait according to a `Retry-After` value; None if absent or unreadable.

    An HTTP date is measured against the response's own `Date` header when there is one
    (both come from the server's clock), else against `now` (Unix seconds, default: now).
    """
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    reference = time.time() if now is None else now
    if date is not None:
        try:
            sent = parsedate_to_datetime(date)
            reference = (sent if sent.tzinfo else sent.replace(tzinfo=UTC)).timestamp()
        except (TypeError, ValueError, IndexError):
            pass
    return max(0.0, moment.timestamp() - reference)


class RetryBudget:
    """A token bucket of retries, shared by all calls of a client (thread-safe).

    Starts full with `capacity` tokens; refills at `refill_per_s` up to `capacity`. A retry
    after a failure costs one token; with none left, the client stops retrying.
    """

    def __init__(
        self, capacity: float = 10.0, refill_per_s: float = 0.5, *, clock: Clock = time.monotonic
    ) -> None:
        if capacity < 1 or refill_per_s < 0:
            raise ValueError("a retry budget needs capacity >= 1 and refill_per_s >= 0")
        self.capacity = capacity
        self.refill_per_s = refill_per_s
        self._clock = clock
        self._tokens = capacity
        self._updated = clock()
        # One lock: a sync client may be shared by threads; the critical section is tiny.
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._updated)
        self._tokens = min(self.capacity, self._tokens + elapsed * self.refill_per_s)
        self._updated = now

    @property
    def tokens(self) -> float:
        """Tokens available now."""
        with self._lock:
            self._refill()
            return self._tokens

    def try_spend(self, cost: float = 1.0) -> bool:
        """Take `cost` tokens if there are that many; False (and take nothing) otherwise."""
        with self._lock:
            self._refill()
            if self._tokens < cost:
                return False
            self._tokens -= cost
            return True
