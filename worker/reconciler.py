"""One worker's reconciliation pass: claim what is due and reconcile it.

Claiming happens in one short statement (`claim_due`, FOR UPDATE SKIP LOCKED plus a fence
bump), so any number of worker processes can run side by side without two owning one row;
the batch's payments and refunds are read right after it, one statement per kind.
Reconciling happens outside any transaction, up to `PAYMENTS_RECONCILE_CONCURRENCY`
operations at once, the next batch claimed as soon as half of that window is free. A batch
holds operations of every name (payments, refunds); each goes to the reconciler its name
picks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from typing import Any

from app.db.database import Connection, Database
from app.errors import is_transient_database_error
from app.observability.logging import new_context
from app.observability.metrics import Metrics
from app.operations import leases
from app.operations.outcomes import Outcome
from app.operations.values import DueRef, OwnedRef
from app.recovery.reconcile import Reconciler
from app.settings import Settings

logger = logging.getLogger("payments.worker")


def worker_name() -> str:
    """This process's name in leases and history."""
    return f"worker:{socket.gethostname()}:{os.getpid()}"


class ReconcileWorker:
    """Reconciles due operations in batches until told to stop."""

    def __init__(
        self,
        *,
        settings: Settings,
        db: Database,
        reconcilers: Mapping[str, Reconciler[Any, Any]],
        name: str,
        metrics: Metrics,
    ):
        self._settings = settings
        self._db = db
        self._reconcilers = reconcilers
        self.name = name
        self._metrics = metrics
        self.stopping = asyncio.Event()
        self.reconciled = 0
        self._busy = asyncio.Lock()

    async def _claim(self, limit: int) -> list[tuple[DueRef, Any]]:
        """Claim up to `limit` due operations, each with its subject when it could be read."""
        async with self._db.connection() as conn:
            owned = await leases.claim_due(
                conn, owner=self.name, lease_s=self._settings.lease_s, limit=limit
            )
            if not owned:
                return []
            subjects = await self._load_subjects(conn, owned)
        return [(due, subjects.get(due.ref.id)) for due in owned]

    async def _load_subjects(self, conn: Connection, owned: list[DueRef]) -> dict[uuid.UUID, Any]:
        """The batch's payments and refunds, one read per operation name.

        Only a saving: an operation missing here (its row unreadable, or the read failed)
        is reconciled as before, its driver reading the row itself.
        """
        by_name: dict[str, list[uuid.UUID]] = {}
        for due in owned:
            by_name.setdefault(due.operation_name, []).append(due.ref.id)
        subjects: dict[uuid.UUID, Any] = {}
        for name, ids in by_name.items():
            try:
                subjects.update(await self._reconcilers[name].load_subjects(conn, ids))
            except Exception:
                logger.exception("reading the subjects of %d operations failed", len(ids))
        return subjects

    async def _reconcile_one(self, due: DueRef, subject: Any) -> None:
        ref = due.ref
        new_context(operation_id=str(ref.id), worker=self.name)
        outcome: Outcome | None
        reconciler = self._reconcilers[due.operation_name]
        try:
            outcome = await reconciler.reconcile(ref, actor=self.name, subject=subject)
        except Exception as exc:
            if is_transient_database_error(exc):
                # The database went away (a failover, say), perhaps during a COMMIT whose
                # fate is unknown: as after a crash, the lease expires and whoever claims
                # the operation next reconciles it. Not a failed check: no attempt counted.
                logger.warning("database unavailable while reconciling operation %s", ref.id)
                return
            logger.exception("reconciling operation %s failed", ref.id)
            # Counted as a check that settled nothing, on the backoff schedule: neither
            # re-claimed at once in a loop nor forever without reaching needs_attention.
            outcome = await self._record_failure(reconciler, ref, exc)
        if outcome is not None:
            self._metrics.reconciled(outcome, source="worker")
            self.reconciled += 1

    async def _record_failure(
        self, reconciler: Reconciler[Any, Any], ref: OwnedRef, error: Exception
    ) -> Outcome | None:
        try:
            return await reconciler.record_failure(ref, error, actor=self.name)
        except Exception:
            # The database itself may be what failed: the lease then expires and the
            # operation is claimed again, as after a crash.
            logger.exception("recording the failure of operation %s failed", ref.id)
            return None

    async def drain(self) -> int:
        """Reconcile until nothing is due (or stopping); the total claimed."""
        async with self._busy:
            total = await self._pump()
            async with self._db.connection() as conn:
                await self._metrics.refresh_backlog(conn)
        return total

    async def _pump(self) -> int:
        """Keep up to `reconcile_concurrency` reconciliations running until nothing is due.

        Whenever half the window (or a whole batch) is free, the next batch is claimed, so
        the window stays full instead of each batch waiting for its slowest member. Every
        claimed operation starts at once: none waits with its lease running out, and each
        is bounded by the provider timeout (twice: a lookup, then perhaps a resend). A claim
        that finds less than it asked for means the backlog is drained for now: nothing more
        is claimed until the window is empty, then one last claim makes sure.
        """
        window = self._settings.reconcile_concurrency
        batch = self._settings.reconcile_batch_size
        running: set[asyncio.Task[None]] = set()
        total = 0
        exhausted = False
        try:
            while True:
                free = window - len(running)
                if self.stopping.is_set():
                    claim = False
                elif exhausted:
                    claim = not running
                else:
                    claim = free >= min(batch, (window + 1) // 2)
                if claim:
                    limit = min(batch, free)
                    claimed = await self._claim(limit)
                    total += len(claimed)
                    running.update(
                        asyncio.create_task(self._reconcile_one(due, subject))
                        for due, subject in claimed
                    )
                    if not running:
                        break
                    exhausted = len(claimed) < limit
                    continue
                if not running:
                    break
                done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.exception() is not None:
                        logger.error("a reconciliation task failed", exc_info=task.exception())
        except asyncio.CancelledError:
            for task in running:
                task.cancel()
            raise
        finally:
            # Whatever ends the pass, the reconciliations under way finish (or, cancelled,
            # end) before it returns: none is left running unowned by a pass.
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        return total

    async def wait_idle(self) -> None:
        """Return once no pass is under way."""
        async with self._busy:
            pass
