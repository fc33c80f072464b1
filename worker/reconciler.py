"""One worker's reconciliation pass: claim what is due and reconcile it.

Claiming happens in one short transaction (`claim_due`, FOR UPDATE SKIP LOCKED plus a fence
bump), so any number of worker processes can run side by side without two owning one row.
Reconciling happens outside any transaction, the whole batch concurrently. A batch holds
operations of every name (payments, refunds); each goes to the reconciler its name picks.
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
from app.operations.refs import DueRef, OwnedRef
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

    async def run_batch(self) -> int:
        """Claim one batch and reconcile it; the number of operations claimed."""
        if self.stopping.is_set():
            return 0
        async with self._db.connection() as conn:
            owned = await leases.claim_due(
                conn,
                owner=self.name,
                lease_s=self._settings.lease_s,
                limit=self._settings.reconcile_batch_size,
            )
            if not owned:
                return 0
            subjects = await self._load_subjects(conn, owned)
        # The whole batch is reconciled at once: no claimed operation waits in a queue while
        # its lease runs out. Each reconciliation is bounded by the provider timeout (twice:
        # a lookup, then perhaps a resend).
        await asyncio.gather(*(self._reconcile_one(ref, subjects.get(ref.ref.id)) for ref in owned))
        return len(owned)

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
        """Run batches until nothing is due (or stopping); the total claimed."""
        total = 0
        async with self._busy:
            while not self.stopping.is_set():
                claimed = await self.run_batch()
                if claimed == 0:
                    break
                total += claimed
            async with self._db.connection() as conn:
                await self._metrics.refresh_backlog(conn)
        return total

    async def wait_idle(self) -> None:
        """Return once no pass is under way."""
        async with self._busy:
            pass
