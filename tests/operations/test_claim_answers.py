"""What the claim answers, on the test PostgreSQL: the winner's reference, or the winner's row.

`repository.claim` is insert-first: the request that wins the key owns the operation at
fence 1 with no recovery check counted yet (the first check's schedule and `needs_attention`
count from there), and a later request with the same key reads the winner's row in the same
round trip instead of owning anything. `repository.claim_guarded` checks its guard first in
the same statement: a refused claim stores nothing, and the guard's row comes back either way.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from psycopg.rows import DictRow

from app.operations import repository as operations
from app.operations.states import State
from app.operations.values import Claimed, ClaimGuard, OwnedRef, Snapshot
from app.tracing.state import STATE
from tests.support.factories.claims import claim_payment
from tests.support.factories.payments import new_key
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb
from tests.support.readers.operations import transitions


@pytest.fixture
def made(db: psycopg.Connection[DictRow]) -> Iterator[list[uuid.UUID]]:
    """Operations made by the test (no payment behind them), deleted at its end."""
    ids: list[uuid.UUID] = []
    yield ids
    db.execute("DELETE FROM operations WHERE id = ANY(%s)", (ids,))


def _claim(
    async_db: AsyncDb,
    tenant: TenantHandle,
    key: str,
    operation_id: uuid.UUID,
    send_reason: str | None = None,
) -> Claimed | Snapshot | None:
    async def claim() -> Claimed | Snapshot | None:
        async with async_db.db.transaction() as conn:
            return await claim_payment(
                conn,
                tenant_id=tenant.id,
                operation_id=operation_id,
                key=key,
                send_reason=send_reason,
            )

    return async_db.run(claim())


def test_the_winner_owns_the_operation_at_fence_1_with_no_check_counted(
    async_db: AsyncDb, tenant: TenantHandle, made: list[uuid.UUID]
) -> None:
    operation_id = uuid.uuid4()
    made.append(operation_id)
    won = _claim(async_db, tenant, new_key(), operation_id)
    assert isinstance(won, Claimed)
    assert won.ref == OwnedRef(
        id=operation_id,
        tenant_id=tenant.id,
        created_at=won.at,
        fence=1,
        state=State.PROVIDER_REQUEST_SENT,
        attempts=0,
    )


def test_a_second_claim_of_the_key_reads_the_winners_row(
    async_db: AsyncDb, tenant: TenantHandle, made: list[uuid.UUID]
) -> None:
    key, first = new_key(), uuid.uuid4()
    made.append(first)
    assert isinstance(_claim(async_db, tenant, key, first), Claimed)

    second = uuid.uuid4()
    answer = _claim(async_db, tenant, key, second)
    assert isinstance(answer, Snapshot)
    assert answer.operation.id == first
    assert answer.state is State.PROVIDER_REQUEST_SENT
    assert answer.lease_live


def test_the_send_edge_is_audited_with_the_claims_reason_or_the_default_one(
    async_db: AsyncDb, tenant: TenantHandle, made: list[uuid.UUID], db: psycopg.Connection[DictRow]
) -> None:
    plain, routed = uuid.uuid4(), uuid.uuid4()
    made.extend([plain, routed])
    _claim(async_db, tenant, new_key(), plain)
    _claim(async_db, tenant, new_key(), routed, send_reason="calling secondary (attempt 1)")
    assert [(t["trigger"], t["reason"]) for t in transitions(db, plain)] == [
        ("claim", "request received"),
        ("send", "calling the provider"),
    ]
    assert [t["reason"] for t in transitions(db, routed)][1] == "calling secondary (attempt 1)"


def test_a_traced_claim_marks_its_span_with_the_operation_and_fence_1(
    async_db: AsyncDb,
    tenant: TenantHandle,
    made: list[uuid.UUID],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    monkeypatch.setattr(STATE, "enabled", True)
    operation_id = uuid.uuid4()
    made.append(operation_id)

    async def traced_claim() -> Claimed | Snapshot | None:
        with tracer.start_as_current_span("request"):
            async with async_db.db.transaction() as conn:
                return await claim_payment(
                    conn,
                    tenant_id=tenant.id,
                    operation_id=operation_id,
                    key=new_key(),
                )

    assert isinstance(async_db.run(traced_claim()), Claimed)
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes["payments.operation_id"] == str(operation_id)
    assert (attributes["payments.fence"], attributes["payments.transition"]) == (1, "claim")


def _guarded(
    async_db: AsyncDb, tenant: TenantHandle, key: str, operation_id: uuid.UUID, guard: ClaimGuard
) -> tuple[Claimed | Snapshot | None, tuple[Any, ...] | None]:
    async def claim() -> tuple[Claimed | Snapshot | None, tuple[Any, ...] | None]:
        async with async_db.db.connection() as conn:
            return await operations.claim_guarded(
                conn,
                operation_id=operation_id,
                tenant_id=tenant.id,
                operation_name="create_payment",
                idempotency_key=key,
                fingerprint="0" * 64,
                owner="api:first",
                lease_s=30,
                key_ttl_s=86400,
                guard=guard,
            )

    return async_db.run(claim())


def _guard(ok: bool | None) -> ClaimGuard:
    """A guard of one row (`ok`, and a value), or none when `ok` is None."""
    sql = "SELECT %(g_ok)s::boolean AS ok, 'seen' AS what WHERE %(g_ok)s::boolean IS NOT NULL"
    return ClaimGuard(sql, {"g_ok": ok}, width=2)


@pytest.mark.parametrize("ok", [False, None], ids=["refused", "no row"])
def test_a_claim_its_guard_refuses_stores_nothing_and_returns_the_guards_row(
    async_db: AsyncDb,
    tenant: TenantHandle,
    made: list[uuid.UUID],
    db: psycopg.Connection[DictRow],
    ok: bool | None,
) -> None:
    operation_id = uuid.uuid4()
    made.append(operation_id)
    claimed, row = _guarded(async_db, tenant, new_key(), operation_id, _guard(ok))
    assert claimed is None
    assert row == (None if ok is None else (False, "seen"))
    assert db.execute("SELECT FROM operations WHERE id = %s", (operation_id,)).fetchone() is None


def test_a_claim_its_guard_lets_through_is_claimed_with_the_guards_row(
    async_db: AsyncDb, tenant: TenantHandle, made: list[uuid.UUID]
) -> None:
    key, first = new_key(), uuid.uuid4()
    made.append(first)
    claimed, row = _guarded(async_db, tenant, key, first, _guard(True))
    assert isinstance(claimed, Claimed)
    assert claimed.ref.id == first
    assert row == (True, "seen")
    # Refused or not, a claim of a taken key reads the row holding it.
    for ok in (True, False):
        again, row = _guarded(async_db, tenant, key, uuid.uuid4(), _guard(ok))
        assert isinstance(again, Snapshot)
        assert again.operation.id == first
        assert row == (ok, "seen")
