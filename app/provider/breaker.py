"""A circuit breaker around sends to the provider: fail fast and send nothing while it fails.

Retries are a system-wide resource: when the provider keeps timing out, every request
waiting out the full provider timeout, and every client retrying into it, turns an outage
into a pile-up. So after `failures` consecutive sends that timed out, could not connect or
were answered 5xx, the breaker opens for `cooldown_s`: sends are refused at once (the charge
is certainly not sent). After the cool-down one send at a time probes (half-open); a send
the provider answers closes it, a failed probe opens it again. Any answered send resets the
count. Lookups never pass through it: they are how unknown outcomes get settled.

The breaker is per process: each API and worker process learns of an outage from its own
sends. With N processes the provider sees at most N probes per cool-down, and a process
that has not sent yet still tries (and fails) `failures` times before it opens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

logger = logging.getLogger("payments.provider")


class BreakerState(IntEnum):
    """As the metric reports it."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


@dataclass(frozen=True)
class Admission:
    """Leave to send; `probe` when it is the one send a half-open breaker lets through."""

    probe: bool


# How long a send refused while another send probes is told to wait.
PROBE_WAIT_S = 1.0


class CircuitBreaker:
    """Consecutive send failures open it; an answered send closes it."""

    def __init__(
        self,
        *,
        failures: int,
        cooldown_s: float,
        on_change: Callable[[BreakerState], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        name: str | None = None,
    ) -> None:
        # The provider it guards, for the log (each provider has a breaker of its own).
        self._name = name
        self._threshold = failures
        self._cooldown_s = cooldown_s
        self._on_change = on_change
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False

    @property
    def state(self) -> BreakerState:
        return self._state

    def before_send(self) -> Admission | float:
        """An admission to send (the probe, when half-open), or seconds until one may go."""
        if self._state is BreakerState.CLOSED:
            return Admission(probe=False)
        if self._state is BreakerState.OPEN:
            left = self._opened_at + self._cooldown_s - self._clock()
            if left > 0:
                return left
            self._move(BreakerState.HALF_OPEN)
        if self._probing:
            return PROBE_WAIT_S
        self._probing = True
        return Admission(probe=True)

    def after_send(self, admission: Admission, *, healthy: bool | None) -> None:
        """What an admitted send came to: answered (True), failed (False), no verdict (None)."""
        if admission.probe:
            self._probing = False
        if healthy is None:
            return
        if healthy:
            self._failures = 0
            if self._state is not BreakerState.CLOSED:
                self._move(BreakerState.CLOSED)
            return
        self._failures += 1
        failed_probe = admission.probe and self._state is BreakerState.HALF_OPEN
        too_many = self._state is BreakerState.CLOSED and self._failures >= self._threshold
        if failed_probe or too_many:
            self._opened_at = self._clock()
            self._move(BreakerState.OPEN)

    def _move(self, state: BreakerState) -> None:
        logger.warning(
            "provider circuit breaker %s",
            state.name.lower().replace("_", "-"),
            extra={
                "fields": {
                    "from": self._state.name,
                    "to": state.name,
                    "consecutive_failures": self._failures,
                    **({"provider": self._name} if self._name else {}),
                }
            },
        )
        self._state = state
        if self._on_change is not None:
            self._on_change(state)
