"""Recovery policy: how often an unknown outcome is checked again, and when a person must look.

Every check that ends without a definite answer counts as an attempt; the next check comes
after a capped exponential backoff with jitter; past `max_attempts` the operation is flagged
`needs_attention` and the checks go on at the cap. An outcome is never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.operations.refs import Schedule
from app.recovery.backoff import next_delay_s


@dataclass(frozen=True)
class RecoveryPolicy:
    """The numbers behind the schedule, from settings."""

    max_attempts: int
    backoff_base_s: float
    backoff_max_s: float

    def schedule(self, attempts: int, *, counted: bool) -> Schedule:
        """The next check after a send or check that settled nothing.

        `counted` says whether this check counts against `max_attempts`.
        """
        attempts = attempts + 1 if counted else attempts
        delay = next_delay_s(attempts, base_s=self.backoff_base_s, max_s=self.backoff_max_s)
        return Schedule(
            attempts=attempts, delay_s=delay, needs_attention=attempts >= self.max_attempts
        )
