"""The inbox's plain values: the states of a received event (`provider_events.state`).

No SQLAlchemy: the table is `models.py`'s (docs/architecture.md).
"""

from __future__ import annotations

from enum import StrEnum


class EventState(StrEnum):
    """Where a provider's event is: received and not yet applied, applied, set aside for a
    later try (parked), found to apply to nothing (rejected), or found to contradict the
    final outcome its operation holds (contradicted: queued as a discrepancy, nothing
    written to the operation; `contradiction.py`)."""

    RECEIVED = "received"
    APPLIED = "applied"
    PARKED = "parked"
    REJECTED = "rejected"
    CONTRADICTED = "contradicted"


# What the apply step still has to look at (its scan's partial index).
PENDING = (EventState.RECEIVED, EventState.PARKED)
# What is done with: deleted once past its retention (`retention.py`). A contradicted
# event's item in the discrepancy queue keeps its event id and what it said.
DONE = (EventState.APPLIED, EventState.REJECTED, EventState.CONTRADICTED)
