"""Recovery policy: how often an unknown outcome is checked again, and when a person must look.

Every recovery check that ends without a definite answer counts as an attempt, whoever made
it (a worker, or a client's retry reconciling inline): otherwise a client retrying faster
than the backoff would keep an operation from ever being flagged. The next check comes after
a capped exponential backoff with jitter; past `max_attempts` the operation is flagged
`needs_attention` and the checks go on at the cap. An outcome is never guessed.

With every configured provider's notifications set up (`PAYMENTS_PROVIDER_EVENT_SECRETS`),
the provider's own event is what normally settles an unknown operation, within seconds
(app/provider_events/): a check then waits at least `notified_wait_s`
(`PAYMENTS_NOTIFIED_RECHECK_S`), so polling becomes the safety net that still finds what a
lost notification did not tell. A provider without secrets sends nothing we would take, and
the schedule does not know which provider an operation awaits: one such provider keeps the
plain backoff for every operation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from app.jobs.backoff import next_delay_s
from app.operations.values import Schedule
from app.settings import Settings

# A stretched wait is drawn between it and this many times it, as the backoff is jittered:
# operations an outage left unknown together are not all checked at the same instant.
NOTIFIED_SPREAD = 1.25


@dataclass(frozen=True)
class RecoveryPolicy:
    """The numbers behind the schedule, from settings."""

    max_attempts: int
    backoff_base_s: float
    backoff_max_s: float
    # The least wait before the next check (0: the backoff alone); set only while every
    # provider notifies (`from_settings`).
    notified_wait_s: float = 0.0

    @classmethod
    def from_settings(cls, settings: Settings) -> RecoveryPolicy:
        """The policy the settings give: the backoff, stretched to
        PAYMENTS_NOTIFIED_RECHECK_S when every configured provider has notification secrets."""
        secrets = settings.provider_event_secrets
        notified = all(secrets.get(spec.name) for spec in settings.provider_specs())
        return cls(
            max_attempts=settings.max_attempts,
            backoff_base_s=settings.backoff_base_s,
            backoff_max_s=settings.backoff_max_s,
            notified_wait_s=settings.notified_recheck_s if notified else 0.0,
        )

    def after_send(self, attempts: int) -> Schedule:
        """A client's own send settled nothing (a timeout, say): the first check is due soon.

        Not a recovery check, so not an attempt.
        """
        return self._schedule(attempts)

    def after_check(self, attempts: int) -> Schedule:
        """A recovery check (lookup, resend, or a reconcile that failed) settled nothing."""
        return self._schedule(attempts + 1)

    def while_circuit_open(self, attempts: int, wait_s: float | None) -> Schedule:
        """A resend the circuit breaker held back: not a check; due when it may send again.

        Not stretched for notifications: nothing was sent this time, so no event will tell.
        """
        return Schedule(
            attempts=attempts,
            delay_s=max(wait_s or 0.0, 0.0),
            needs_attention=attempts >= self.max_attempts,
        )

    def _schedule(self, attempts: int) -> Schedule:
        delay = next_delay_s(attempts, base_s=self.backoff_base_s, max_s=self.backoff_max_s)
        if delay < self.notified_wait_s:
            delay = self.notified_wait_s * random.uniform(1.0, NOTIFIED_SPREAD)
        return Schedule(
            attempts=attempts, delay_s=delay, needs_attention=attempts >= self.max_attempts
        )
