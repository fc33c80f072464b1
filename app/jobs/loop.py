"""The worker's one loop: claim a window of due items, run each under its lease, until idle.

Every job of the worker (recovering operations, delivering webhooks, expiring keys) is the
same loop over a different `Job`: the job says what is due by claiming it (one short
statement that leases what it picks, so any number of workers can claim side by side) and
what one item takes (`handle`); the loop decides when to claim and how many items run at
once (`Pace`). A pass:

- keeps up to `window` items running, each its own task, started the moment it is claimed
  (none waits in a queue with its lease running out);
- claims again once `refill_at` slots are free (at most `batch` items, never more than there
  is room for), so the window stays full instead of each batch waiting for its slowest item;
- takes a claim that finds less than it asked for to mean nothing more is due for now: it
  claims again only once what runs has finished (one last look), or, with `patience_s`, once
  that long has passed, so items that take long never keep newly due ones waiting;
- ends when a claim finds nothing and nothing runs: the same pass is the scheduled tick and
  the `--once` drain;
- once `stopping` is set, claims nothing new and lets what runs finish before it returns,
  so nothing claimed is left running unowned by a pass. An item that raises is logged; the
  pass goes on.

The loop knows no table and no kind of item: it imports nothing of the service.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

logger = logging.getLogger("payments.worker")

ItemT = TypeVar("ItemT")


class Job(Protocol[ItemT]):
    """One kind of work the loop runs."""

    @property
    def name(self) -> str:
        """What the logs call it."""
        ...

    async def claim(self, limit: int, /) -> Sequence[ItemT]:
        """Take up to `limit` due items, each leased to this worker: what "due" means."""
        ...

    async def handle(self, item: ItemT, /) -> None:
        """Run one claimed item to its end, while its lease holds."""
        ...


@dataclass(frozen=True)
class Pace:
    """How a job's items are claimed and run."""

    # Items running at once, at most.
    window: int
    # Items one claim takes, at most.
    batch: int
    # Free slots that make a claim worth its statement.
    refill_at: int
    # After a claim that came back short: how long before claiming again although items still
    # run. None: only once they have all finished.
    patience_s: float | None = None

    @classmethod
    def windowed(cls, window: int, batch: int, *, patience_s: float | None = None) -> Pace:
        """Claims of `batch` whenever a batch's worth of slots (or half the window) is free."""
        return cls(window, batch, min(batch, (window + 1) // 2), patience_s)


class WorkLoop(Generic[ItemT]):
    """Runs one job's passes, one at a time, until `stopping` is set."""

    def __init__(
        self,
        job: Job[ItemT],
        pace: Pace,
        *,
        stopping: asyncio.Event,
        after_pass: Callable[[], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.job = job
        self.pace = pace
        self.stopping = stopping
        self._after_pass = after_pass
        self._clock = clock
        self._busy = asyncio.Lock()

    async def run(self) -> int:
        """One pass: claim and run until nothing is due and nothing runs (or stopping); the
        number of items claimed. A pass already under way is waited for, not joined."""
        async with self._busy:
            total = await self._pass()
            if self._after_pass is not None:
                await self._after_pass()
        return total

    async def wait_idle(self) -> None:
        """Return once no pass is under way."""
        async with self._busy:
            pass

    async def _pass(self) -> int:
        pace = self.pace
        running: set[asyncio.Task[None]] = set()
        total = 0
        # When the last claim came back short (nothing more due for now), else None.
        short_at: float | None = None
        try:
            while True:
                free = pace.window - len(running)
                if self.stopping.is_set() or free <= 0:
                    claim = False
                elif short_at is not None:
                    claim = not running or self._patience_left(short_at) == 0
                else:
                    claim = free >= pace.refill_at
                if claim:
                    limit = min(pace.batch, free)
                    claimed = await self.job.claim(limit)
                    total += len(claimed)
                    running.update(asyncio.create_task(self.job.handle(item)) for item in claimed)
                    if not running:
                        break
                    short_at = self._clock() if len(claimed) < limit else None
                    continue
                if not running:
                    break
                # Patience only counts while there is room to claim into.
                patient = short_at is not None and free > 0 and not self.stopping.is_set()
                timeout = self._patience_left(short_at) if patient else None
                done, running = await asyncio.wait(
                    running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    if task.exception() is not None:
                        logger.error("%s: an item failed", self.job.name, exc_info=task.exception())
        except asyncio.CancelledError:
            for task in running:
                task.cancel()
            raise
        finally:
            # Whatever ends the pass, the items under way finish (or, cancelled, end) before
            # it returns.
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        return total

    def _patience_left(self, short_at: float | None) -> float | None:
        """Seconds until a short claim's patience runs out (0 once it has); None: never."""
        if self.pace.patience_s is None or short_at is None:
            return None
        return max(0.0, short_at + self.pace.patience_s - self._clock())
