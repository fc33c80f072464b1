"""What the apply step asks of a notification about a final operation: does it contradict
the outcome we recorded?

A contradiction is a discrepancy between the provider's books and ours, which settlement
keeps (its queue, and the comparison its daily run makes), one layer above the inbox: the
worker hands the apply step settlement's answer to this question
(`app/settlement/notified.py`), as it hands it the reconcilers.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol

from app.db.database import Connection


@dataclass(frozen=True)
class Notified:
    """The event being applied, as a discrepancy it opens names it."""

    # The inbox's row (`provider_events.id`): its body carries the provider's record, and
    # its `event_id` the provider's id of the event.
    inbox_id: int
    provider: str
    type: str
    provider_key: str


class Contradictions(Protocol):
    """The check of an event against the final outcome of its operation."""

    async def queue_if_contradicted(
        self,
        conn: Connection,
        event: Notified,
        *,
        record_name: str,
        operation_id: uuid.UUID,
        actor: str,
    ) -> str | None:
        """When `event` contradicts the final outcome `operation_id` holds, queue the
        discrepancy on `conn` (in the caller's transaction, with the inbox's own write) as
        `actor`, and say why in words; None when it agrees, or is not one to compare."""
        ...
