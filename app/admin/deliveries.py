"""What operators do with webhook deliveries: read them across tenants, redeliver an event.

A redelivery is the tenant's own `POST /events/{id}/redeliver` (`webhooks.deliveries.redeliver`)
run for the event's tenant: every endpoint subscribed to the event's type gets it again
with its retry window restarted; a delivery still pending is left as it is. It changes no
operation, so it leaves no history row; the log names the operator.
"""

from __future__ import annotations

import logging
import uuid

from app.admin.rows import Operator
from app.db.database import Database
from app.errors import NotFound
from app.webhooks import deliveries, operator_reads
from app.webhooks.operator_reads import EventDeliveries, FailedDelivery

logger = logging.getLogger("payments.operators")


class DeliveryActions:
    """Webhook deliveries for operators: reads across tenants, and redelivery."""

    def __init__(self, *, db: Database) -> None:
        self._db = db

    async def for_operation(
        self, *, tenant_id: uuid.UUID, operation_id: uuid.UUID
    ) -> list[EventDeliveries]:
        async with self._db.connection() as conn:
            return await operator_reads.for_operation(
                conn, tenant_id=tenant_id, operation_id=operation_id
            )

    async def failed(
        self, *, after: uuid.UUID | None, limit: int
    ) -> tuple[list[FailedDelivery], bool]:
        async with self._db.connection() as conn:
            return await operator_reads.failed(conn, after=after, limit=limit)

    async def count_failed(self) -> int:
        async with self._db.connection() as conn:
            return await operator_reads.count_failed(conn)

    async def redeliver(self, event_id: uuid.UUID, operator: Operator) -> int:
        """Queue the event again for its tenant's subscribed endpoints; how many were queued.

        `NotFound` if there is no such event.
        """
        async with self._db.connection() as conn:
            tenant_id = await operator_reads.event_tenant(conn, event_id)
            queued = (
                None
                if tenant_id is None
                else await deliveries.redeliver(conn, tenant_id=tenant_id, event_id=event_id)
            )
        if queued is None:
            raise NotFound("no such event")
        fields = {
            "event_id": str(event_id),
            "tenant": str(tenant_id),
            "operator": operator.name,
            "deliveries_queued": queued,
        }
        logger.warning("event redelivered by an operator", extra={"fields": fields})
        return queued
