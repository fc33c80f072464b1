"""When to look at an unknown operation again: capped exponential backoff with jitter."""

from __future__ import annotations

import random


def next_delay_s(
    attempts: int, *, base_s: float, max_s: float, rng: random.Random | None = None
) -> float:
    """Seconds until the next check after `attempts` failed checks.

    The ceiling doubles per attempt up to `max_s`; the delay is drawn from its upper half
    ("equal jitter"), so checks spread out without ever collapsing to zero.
    """
    ceiling = min(max_s, base_s * (2 ** min(attempts, 62)))
    draw: float = (rng or random).uniform(0.5, 1.0)
    return float(ceiling * draw)
