"""The expire job: the key lifecycle's two steps, in small batches (app/operations/expiry.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import Counter

from app.db.database import Connection, Database
from app.observability.metrics import Metrics
from app.operations.expiry import expire_responses, release_tombstones
from app.settings import Settings

logger = logging.getLogger("payments.expiry")


class ExpireJob:
    """Drops stored responses past the key TTL and releases tombstones past theirs."""

    def __init__(
        self,
        *,
        settings: Settings,
        db: Database,
        metrics: Metrics,
        stopping: asyncio.Event,
    ):
        self._settings = settings
        self._db = db
        self._metrics = metrics
        self._stopping = stopping

    async def run(self) -> tuple[int, int]:
        """Run both steps until nothing is left (or stopping); (expired, released)."""
        ttl, tombstone_ttl = self._settings.key_ttl_s, self._settings.tombstone_ttl_s
        expired = await self._drain(
            lambda conn, limit: expire_responses(conn, key_ttl_s=ttl, limit=limit),
            self._metrics.keys_expired,
        )
        released = await self._drain(
            lambda conn, limit: release_tombstones(
                conn, tombstone_ttl_s=tombstone_ttl, limit=limit
            ),
            self._metrics.keys_released,
        )
        if expired or released:
            logger.info(
                "keys expired",
                extra={"fields": {"responses_dropped": expired, "keys_released": released}},
            )
        return expired, released

    async def _drain(
        self, step: Callable[[Connection, int], Awaitable[int]], counter: Counter
    ) -> int:
        """Run `step` batch after batch until a batch comes back short."""
        batch = self._settings.expire_batch_size
        total = 0
        while not self._stopping.is_set():
            # One statement, so one short transaction, per batch: locks are held for one
            # batch at most.
            async with self._db.connection() as conn:
                count = await step(conn, batch)
            total += count
            counter.inc(count)
            if count < batch:
                break
        return total
