"""The inbox's plain values: the states of a received event (`provider_events.state`).

No SQLAlchemy: the table is `models.py`'s (docs/architecture.md).
"""

from __future__ import annotations

from enum import StrEnum


class EventState(StrEnum):
    """Where a provider's event is: received and not yet applied, applied, set aside for a
    later try (parked), or found to apply to nothing (rejected)."""

    RECEIVED = "received"
    APPLIED = "applied"
    PARKED = "parked"
    REJECTED = "rejected"


# What the apply step still has to look at (its scan's partial index).
PENDING = (EventState.RECEIVED, EventState.PARKED)
# What is done with: deleted once past its retention (`retention.py`).
DONE = (EventState.APPLIED, EventState.REJECTED)
