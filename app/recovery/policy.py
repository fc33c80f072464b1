"""Recovery policy: how often an unknown outcome is checked again, and when a person must look.

Every recovery check that ends without a definite answer counts as an attempt, whoever made
it (a worker, or a client's retry reconciling inline): otherwise a client retrying faster
than the backoff would keep an operation from ever being flagged. The next check comes after
a capped exponential backoff with jitter; past `max_attempts` the operation is flagged
`needs_attention` and the checks go on at the cap. An outcome is never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.jobs.backoff import next_delay_s
from app.operations.values import Schedule


@dataclass(frozen=True)
class RecoveryPolicy:
    """The numbers behind the schedule, from settings."""

    max_attempts: int
    backoff_base_s: float
    backoff_max_s: float

    def after_send(self, attempts: int) -> Schedule:
        """A client's own send settled nothing (a timeout, say): the first check is due soon.

        Not a recovery check, so not an attempt.
        """
        return self._schedule(attempts)

    def after_check(self, attempts: int) -> Schedule:
        """A recovery check (lookup, resend, or a reconcile that failed) settled nothing."""
        return self._schedule(attempts + 1)

    def while_circuit_open(self, attempts: int, wait_s: float | None) -> Schedule:
        """A resend the circuit breaker held back: not a check; due when it may send again."""
        return Schedule(
            attempts=attempts,
            delay_s=max(wait_s or 0.0, 0.0),
            needs_attention=attempts >= self.max_attempts,
        )

    def _schedule(self, attempts: int) -> Schedule:
        delay = next_delay_s(attempts, base_s=self.backoff_base_s, max_s=self.backoff_max_s)
        return Schedule(
            attempts=attempts, delay_s=delay, needs_attention=attempts >= self.max_attempts
        )
