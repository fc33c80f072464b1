"""The worker's recovery job: what is due, and reconciling one claimed operation.

Due: in-flight operations whose owner's lease ran out (the owner crashed or hung) and unknown
operations whose next check has come, of any operation name, claimed tenant by tenant, one
short statement each (`leases.claim_due`, FOR UPDATE SKIP LOCKED plus a fence bump; the
tenants' statements sent together, a round trip or two a claim, and reading the days from
the backlog's horizon on), so any number of worker processes can run side by side without
two owning one row. The batch's
payments and refunds are read right after it, one statement per name. Each operation goes to
the reconciler its name picks and is reconciled outside any transaction; the loop
(`app/jobs/loop.py`) runs up to PAYMENTS_RECONCILE_CONCURRENCY of them at once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from app.db.database import Connection, Database
from app.errors import is_transient_database_error
from app.jobs.loop import Pace
from app.jobs.tenants import KEEP_TENANTS_S, KeptTenants
from app.observability.logging import new_context
from app.observability.metrics import Metrics
from app.operations import leases, reads
from app.operations.horizon import Horizon
from app.operations.outcomes import Outcome, reconciled_as
from app.operations.values import DueRef, OwnedRef
from app.provider.registry import UnknownProvider
from app.recovery.reconcile import Reconciler
from app.settings import Settings
from app.tracing.spans import links_to, span
from app.tracing.state import STATE

logger = logging.getLogger("payments.worker")

# A claimed operation, with its subject (payment, refund) when it could be read.
DueWork = tuple[DueRef, Any]


def recovery_pace(settings: Settings) -> Pace:
    """PAYMENTS_RECONCILE_CONCURRENCY running, claimed PAYMENTS_RECONCILE_BATCH_SIZE at a time.

    No patience: a reconciliation is bounded by the provider timeout (twice: a lookup, then
    perhaps a resend), so the pass lets it finish before it looks again.
    """
    return Pace.windowed(settings.reconcile_concurrency, settings.reconcile_batch_size)


class RecoveryJob:
    """Reconciles due operations as one worker."""

    name = "reconcile"

    def __init__(
        self,
        *,
        settings: Settings,
        db: Database,
        reconcilers: Mapping[str, Reconciler[Any, Any]],
        worker: str,
        metrics: Metrics,
    ):
        self._settings = settings
        self._db = db
        self._reconcilers = reconcilers
        self._worker = worker
        self._metrics = metrics
        # The tenants with due work, kept between this worker's claims (app/jobs/tenants.py).
        self._tenants = KeptTenants(refresh_s=KEEP_TENANTS_S)
        # The oldest day its claims read, kept between them (app/operations/horizon.py).
        self._horizon = Horizon()

    async def claim(self, limit: int) -> list[DueWork]:
        """Claim up to `limit` due operations, each with its subject when it could be read."""
        async with self._db.connection() as conn:
            owned = await leases.claim_due(
                conn,
                owner=self._worker,
                lease_s=self._settings.lease_s,
                limit=limit,
                tenants=self._tenants,
                horizon=self._horizon,
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
        by_name: dict[str, dict[uuid.UUID, datetime]] = {}
        for due in owned:
            by_name.setdefault(due.operation_name, {})[due.ref.id] = due.ref.created_at
        subjects: dict[uuid.UUID, Any] = {}
        for name, ids in by_name.items():
            try:
                subjects.update(await self._reconcilers[name].load_subjects(conn, ids))
            except Exception:
                logger.exception("reading the subjects of %d operations failed", len(ids))
        return subjects

    async def handle(self, claimed: DueWork) -> None:
        """Reconcile one owned operation; a reconcile that raises is a check that failed.

        Traced (when on) as a trace of its own, linked to the request that claimed the
        operation: a worker's pass is not part of any request (docs/tracing.md).
        """
        if not STATE.enabled:
            await self._reconcile(claimed)
            return
        ref = claimed[0].ref
        try:
            async with self._db.connection() as conn:
                stored = await reads.stored_traceparent(conn, ref)
        except Exception:
            stored = None  # only the link is lost; the reconcile meets the same database
        attributes = {"payments.operation_id": str(ref.id), "payments.fence": ref.fence}
        attributes |= {"payments.attempt": ref.attempts, "payments.actor": "worker"}
        with span("reconcile", root=True, links=links_to(stored), attributes=attributes):
            await self._reconcile(claimed)

    async def _reconcile(self, claimed: DueWork) -> None:
        due, subject = claimed
        ref = due.ref
        new_context(operation_id=str(ref.id), worker=self._worker)
        outcome: Outcome | None
        reconciler = self._reconcilers[due.operation_name]
        try:
            outcome = await reconciler.reconcile(ref, actor=self._worker, subject=subject)
        except Exception as exc:
            if is_transient_database_error(exc):
                # The database went away (a failover, say), perhaps during a COMMIT whose
                # fate is unknown: as after a crash, the lease expires and whoever claims
                # the operation next reconciles it. Not a failed check: no attempt counted.
                logger.warning("database unavailable while reconciling operation %s", ref.id)
                return
            if isinstance(exc, UnknownProvider):
                # A configuration matter (a provider its route names is not configured
                # here), not a fault in the code: one line naming it, not a traceback on
                # every check (docs/architecture.md, several providers).
                logger.error("cannot reconcile operation %s: %s", ref.id, exc)
            else:
                logger.exception("reconciling operation %s failed", ref.id)
            # Counted as a check that settled nothing, on the backoff schedule: neither
            # re-claimed at once in a loop nor forever without reaching needs_attention.
            outcome = await self._record_failure(reconciler, ref, exc)
        if outcome is not None:
            self._metrics.reconciled(reconciled_as(outcome), source="worker")

    async def _record_failure(
        self, reconciler: Reconciler[Any, Any], ref: OwnedRef, error: Exception
    ) -> Outcome | None:
        try:
            return await reconciler.record_failure(ref, error, actor=self._worker)
        except Exception:
            # The database itself may be what failed: the lease then expires and the
            # operation is claimed again, as after a crash.
            logger.exception("recording the failure of operation %s failed", ref.id)
            return None
