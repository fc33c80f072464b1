"""The background task that sends the outbox's events (`notify_outbox.py`).

One task per provider process, started with the app and stopped with it, sends each row that
is due, several charges' at once (up to `CONCURRENCY`) but one row of a charge at a time, so a
charge's events arrive in the order made. Each attempt is a `POST` of the event's body,
signed with the row's secret (`notify_events.signature`), answered within `TIMEOUT_S` or
counted as failed; every attempt is recorded, and what follows (delivered, retried later,
failed) decided by `Outbox.attempted`.

The task sleeps until the next row is due or it is woken: by a new event (`wake`), or by an
attempt ending. Rows a stop cut short stay `pending`, and the next process sends them: the
outbox is in the ledger's file.

`send_now` sends rows at once, from the request that made them (`notify_early`): the call's
answer waits for the attempt, whatever it gets back; a failed one is retried as any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable

import httpx

from fake_provider.notify_events import SIGNATURE_HEADER, signature
from fake_provider.notify_outbox import Outbox

logger = logging.getLogger("fake_provider.notify_sender")

# How long a receiver has to answer an attempt.
TIMEOUT_S = 10.0
# Rows sent at once (each a different charge's).
CONCURRENCY = 16
# The longest an error's text is kept in an attempt's record.
_ERROR_CHARS = 300


class Sender:
    """Sends the outbox's due rows until `stop`; `run` is the task."""

    def __init__(self, outbox: Outbox, *, max_age_s: float) -> None:
        self._outbox = outbox
        self._max_age_s = max_age_s
        self._client = httpx.AsyncClient(
            timeout=TIMEOUT_S,
            follow_redirects=False,
            headers={"User-Agent": "payments-fake-provider"},
        )
        self._wake = asyncio.Event()
        # Rows being sent now: never picked again until their attempt is recorded.
        self._busy: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        """Look for due rows now (a new event was made)."""
        self._wake.set()

    async def run(self) -> None:
        """Send what is due, then sleep until the next row is due or a wake; forever."""
        while True:
            self._wake.clear()
            try:
                timeout = self._start_due()
            except Exception:
                # The outbox could not be read (the file is busy, or broken): look again soon
                # rather than stop sending for the rest of the process's life.
                logger.exception("reading the notifications outbox failed")
                timeout = 1.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def send_now(self, seqs: Iterable[int]) -> None:
        """Send these rows now, one after the other, and return once each attempt is recorded."""
        rows = list(seqs)
        # Marked before the first await, so the task never sends them too.
        self._busy.update(rows)
        self._wake.set()
        for seq in rows:
            await self._deliver(seq, early=True)

    async def stop(self) -> None:
        """Cancel every attempt under way (its row stays to send) and close the client."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()

    def _start_due(self) -> float | None:
        """Start an attempt for each due row there is room for; the seconds until the next
        row falls due (None: nothing is waiting for a time, only for a wake)."""
        free = CONCURRENCY - len(self._busy)
        now = time.time()
        for seq, due_at in self._outbox.heads(free + len(self._busy) + 1):
            if seq in self._busy:
                continue
            if due_at > now:
                return due_at - now
            if free <= 0:
                # An attempt ending wakes the task.
                return None
            self._busy.add(seq)
            task = asyncio.create_task(self._deliver(seq, early=False))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            free -= 1
        return None

    async def _deliver(self, seq: int, *, early: bool) -> None:
        try:
            delivery = self._outbox.delivery(seq)
            if delivery is None:
                return
            started_at = time.time()
            status: int | None = None
            error: str | None = None
            headers = {
                "Content-Type": "application/json",
                SIGNATURE_HEADER: signature(delivery.secret, delivery.body, int(started_at)),
            }
            try:
                response = await self._client.post(
                    delivery.url, content=delivery.body, headers=headers
                )
                status = response.status_code
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
            self._outbox.attempted(
                seq,
                started_at=started_at,
                finished_at=time.time(),
                status=status,
                error=error,
                early=early,
                max_age_s=self._max_age_s,
            )
            if status is None or not 200 <= status < 300:
                logger.info("event %s to %s: %s", delivery.event_id, delivery.url, error or status)
        finally:
            self._busy.discard(seq)
            self._wake.set()
