"""The key lifecycle: replayable, then a tombstone, then free.

    created ── key TTL ──> response dropped, tombstone kept ── tombstone TTL ──> key released
    (replays the stored      (422 IDEMPOTENCY_KEY_EXPIRED,         (the key may name a new
     answer)                  never a second payment)               operation)

Both steps run in small batches, each a plain read of the due rows and then one statement
per tenant among them (each its own short transaction: `app/operations/retention.py`), with
SKIP LOCKED so they never wait on (or hold up) a request working on the same rows. Only terminal
operations expire: an operation whose outcome is not known yet keeps its key however old it
is. Both ages count from the operation's completion (when its outcome became known), so a
key whose outcome took long to settle still replays it for a full TTL. The operation row, its
payment and its history are kept when the key is released.

The lifecycle is the keyed requests' (this package's); the two writes are the operations
record's own (`app/operations/retention.py`), which this module calls with the TTLs. The
package graph runs that way: idempotency sits above operations (tests/test_architecture.py).

The worker runs each step as a job of its loop (`app/jobs/loop.py`), one batch after another
until a batch comes back short: its claim is the batch itself, whose statements pick the due
rows and change them at once, so there is no lease to hold and nothing left to do per row.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from prometheus_client import Counter

from app.db.database import Connection, Database
from app.jobs.loop import Pace, WorkLoop
from app.operations import retention

logger = logging.getLogger("payments.expiry")


async def expire_responses(conn: Connection, *, key_ttl_s: int, limit: int) -> list[uuid.UUID]:
    """Drop stored responses of terminal operations past the key TTL; of which operations."""
    return await retention.drop_responses(conn, completed_before_s=key_ttl_s, limit=limit)


async def release_tombstones(
    conn: Connection, *, tombstone_ttl_s: int, limit: int
) -> list[uuid.UUID]:
    """Free the keys of tombstones past the tombstone TTL; of which operations."""
    return await retention.release_keys(conn, completed_before_s=tombstone_ttl_s, limit=limit)


Step = Callable[[Connection, int], Awaitable[list[uuid.UUID]]]


class ExpiryStep:
    """One step of the lifecycle as a job of the worker's loop: one batch per claim."""

    def __init__(self, name: str, db: Database, step: Step, counter: Counter):
        self.name = name
        self._db = db
        self._step = step
        self._counter = counter

    async def claim(self, limit: int) -> list[uuid.UUID]:
        """One batch, one short transaction per tenant: locks held for a tenant's rows of
        the batch at most."""
        async with self._db.connection() as conn:
            changed = await self._step(conn, limit)
        self._counter.inc(len(changed))
        return changed

    async def handle(self, operation_id: uuid.UUID) -> None:
        """Nothing: the claim's statement has already changed the row."""


async def expire_keys(
    db: Database,
    *,
    key_ttl_s: int,
    tombstone_ttl_s: int,
    batch: int,
    expired: Counter,
    released: Counter,
    stopping: asyncio.Event,
) -> tuple[int, int]:
    """The expire job: both steps, each until nothing is left (or stopping); (expired,
    released)."""
    steps = (
        ExpiryStep(
            "expire responses",
            db,
            lambda conn, limit: expire_responses(conn, key_ttl_s=key_ttl_s, limit=limit),
            expired,
        ),
        ExpiryStep(
            "release tombstones",
            db,
            lambda conn, limit: release_tombstones(
                conn, tombstone_ttl_s=tombstone_ttl_s, limit=limit
            ),
            released,
        ),
    )
    # One batch at a time, the next claimed once the last is done.
    pace = Pace(window=batch, batch=batch, refill_at=batch)
    dropped, freed = [await WorkLoop(step, pace, stopping=stopping).run() for step in steps]
    if dropped or freed:
        logger.info(
            "keys expired",
            extra={"fields": {"responses_dropped": dropped, "keys_released": freed}},
        )
    return dropped, freed
