"""The retry loop's state for one logical operation: deadline, attempts, shared budget.

No I/O here: the clients ask `request_timeout()` before each attempt and `next_delay()` after
each answer that says "not yet", then sleep with their own sleep function. When the next
attempt could not start before the deadline, or a failure finds the budget empty, these raise
`OutcomeUnknown` / `RetryBudgetExhausted` carrying the key and operation id to resume with.

The wait before the next attempt:
- after a failure (transport error, 5xx, 429): full-jitter backoff, and never less than the
  server's `Retry-After`; it spends one token of the retry budget;
- when the server answered and said when to come back (202, 409): its `Retry-After`;
- polling an operation still open, without `Retry-After`: backoff, at least `min_poll_s`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from client.backoff import Backoff, Clock, RetryBudget, full_jitter
from client.decisions import Retry
from client.errors import OutcomeUnknown, RetryBudgetExhausted


@dataclass(frozen=True)
class RetryEvent:
    """Reported to `on_retry` before each wait: what happened and what comes next."""

    #: The attempt that just ended (1 for the first).
    attempt: int
    #: Seconds until the next attempt.
    delay_s: float
    reason: str
    status: int | None
    operation_id: str | None
    idempotency_key: str | None


OnRetry = Callable[[RetryEvent], None]


class RetryState:
    """Deadline, attempt count and last answer of one logical operation."""

    def __init__(
        self,
        *,
        action: str,
        deadline_s: float,
        backoff: Backoff,
        budget: RetryBudget,
        clock: Clock,
        rng: random.Random,
        idempotency_key: str | None = None,
        operation_id: str | None = None,
        effect: str = "charged",
    ) -> None:
        self._action = action
        #: What the operation does, for `OutcomeUnknown`: "it may or may not have been ...".
        self._effect = effect
        self._backoff = backoff
        self._budget = budget
        self._clock = clock
        self._rng = rng
        self._deadline_s = deadline_s
        self.deadline_at = clock() + deadline_s
        self.idempotency_key = idempotency_key
        self.operation_id = operation_id
        self.retries = 0
        self.last: Retry | None = None

    def remaining_s(self) -> float:
        """Seconds left before the deadline."""
        return self.deadline_at - self._clock()

    def request_timeout(self, timeout_s: float) -> float:
        """The timeout of the next attempt: never past the deadline."""
        remaining = self.remaining_s()
        if remaining <= 0:
            raise self._give_up(OutcomeUnknown, "the deadline passed")
        return min(timeout_s, remaining)

    def next_delay(self, decision: Retry) -> float:
        """Seconds to wait before trying again; raises when the client must stop instead."""
        self.last = decision
        if decision.operation_id is not None:
            self.operation_id = decision.operation_id
        backoff = full_jitter(
            self.retries, base_s=self._backoff.base_s, cap_s=self._backoff.cap_s, rng=self._rng
        )
        if decision.failure:
            delay = max(backoff, decision.retry_after_s or 0.0)
        elif decision.retry_after_s is not None:
            delay = decision.retry_after_s
        else:
            delay = max(backoff, self._backoff.min_poll_s)
        if self._clock() + delay >= self.deadline_at:
            raise self._give_up(OutcomeUnknown, "the next attempt would start past the deadline")
        # Only failures spend the budget: answers that say "come back later" are paced by
        # the server already, and the deadline bounds them.
        if decision.failure and not self._budget.try_spend():
            raise self._give_up(RetryBudgetExhausted, "the retry budget is exhausted")
        self.retries += 1
        return delay

    def event(self, delay_s: float) -> RetryEvent:
        """The progress report for the wait `next_delay` just returned."""
        assert self.last is not None
        return RetryEvent(
            attempt=self.retries,
            delay_s=delay_s,
            reason=self.last.reason,
            status=self.last.status,
            operation_id=self.operation_id,
            idempotency_key=self.idempotency_key,
        )

    def _give_up(self, kind: type[OutcomeUnknown], why: str) -> OutcomeUnknown:
        last = self.last.reason if self.last is not None else "no answer yet"
        resume = []
        if self.idempotency_key is not None:
            resume.append(f"send it again with idempotency key {self.idempotency_key}")
        if self.operation_id is not None:
            resume.append(f"wait for operation {self.operation_id}")
        detail = (
            f"{self._action}: no final answer after {self.retries + 1} attempt(s) within "
            f"{self._deadline_s:g}s ({why}; last: {last}). It may or may not have been "
            f"{self._effect}; to find out without doing it twice, "
            + " or ".join(resume or ["retry"])
        )
        return kind(
            detail,
            last_status=self.last.status if self.last is not None else None,
            operation_id=self.operation_id,
            idempotency_key=self.idempotency_key,
        )
