"""What the claim answers, on the test PostgreSQL: the winner's reference, or the winner's row.

`repository.claim` is insert-first: the request that wins the key owns the operation at
fence 1 with no recovery check counted yet (the first check's schedule and `needs_attention`
count from there), and a later request with the same key reads the winner's row in the same
round trip instead of owning anything.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from psycopg.rows import DictRow

from app.operations import repository as operations
from app.operations.states import State
from app.operations.values import Claimed, OwnedRef, Snapshot
from app.tracing.state import STATE
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
            return await operations.claim(
                conn,
                operation_id=operation_id,
                tenant_id=tenant.id,
                operation_name="create_payment",
                idempotency_key=key,
                fingerprint="0" * 64,
                owner="api:first",
                lease_s=30,
                key_ttl_s=86400,
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
                return await operations.claim(
                    conn,
                    operation_id=operation_id,
                    tenant_id=tenant.id,
                    operation_name="create_payment",
                    idempotency_key=new_key(),
                    fingerprint="0" * 64,
                    owner="api:first",
                    lease_s=30,
                    key_ttl_s=86400,
                )

    assert isinstance(async_db.run(traced_claim()), Claimed)
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes["payments.operation_id"] == str(operation_id)
    assert (attributes["payments.fence"], attributes["payments.transition"]) == (1, "claim")
