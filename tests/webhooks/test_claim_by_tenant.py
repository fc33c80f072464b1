"""The webhook deliveries' claim, tenant by tenant (`deliveries.claim`), on a database of its
own.

Which tenants have due deliveries is read without a lock, then each tenant's claim is its own
statement scoped by `tenant_id` (docs/scaling.md): every tenant with due deliveries gets a
share, whatever another's backlog; a tenant at its cap here takes nothing and leaves its
share to the others; a tenant whose deliveries are not due yet is not found.

A database of the module's own: the claim takes whatever is due, so other tests' deliveries
in the session's database would take shares here.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

from app.db.database import open_database
from app.db.migrate import upgrade_head
from app.jobs.tenants import KeptTenants
from app.settings import Settings
from app.webhooks import deliveries
from app.webhooks.deliveries import Claimed
from tests.support.control.database import throwaway_database

Db = psycopg.Connection[DictRow]

# `n` pending deliveries of one event of `tenant` to its endpoint, due for about
# `due_for_s` seconds (not yet, when negative), the oldest first.
_QUEUE = """
    WITH endpoint AS (
        INSERT INTO webhook_endpoints (id, tenant_id, url, secret)
        VALUES (gen_random_uuid(), %(tenant)s, 'https://hooks.example.invalid/', 'whsec_t')
        RETURNING id
    ), operation AS (
        INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                                state, fence)
        SELECT gen_random_uuid(), %(tenant)s, 'create_payment', 'key-' || g, 'f',
               'COMPLETED', 1
        FROM generate_series(1, %(n)s) AS g
        RETURNING id, created_at
    ), event AS (
        INSERT INTO events (id, tenant_id, type, operation_id, data, operation_created_at)
        SELECT gen_random_uuid(), %(tenant)s, 'payment.succeeded', id, '{}'::jsonb, created_at
        FROM operation
        RETURNING id
    )
    INSERT INTO webhook_deliveries (id, tenant_id, event_id, endpoint_id, status,
                                    next_attempt_at)
    SELECT gen_random_uuid(), %(tenant)s, event.id, endpoint.id, 'pending',
           now() - make_interval(secs => %(due_for_s)s)
           + make_interval(secs => row_number() OVER (ORDER BY event.id))
    FROM event, endpoint
"""


@pytest.fixture(scope="module")
def claims_url(database_url: str) -> Iterator[str]:
    with throwaway_database(database_url, "payments_delivery_claims") as url:
        upgrade_head(url)
        yield url


@pytest.fixture
def claims_db(claims_url: str) -> Iterator[Db]:
    with psycopg.connect(claims_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn
        for table in (
            "webhook_deliveries",
            "webhook_endpoints",
            "events",
            "idempotency_keys",
            "operations",
        ):
            conn.execute(f"DELETE FROM {table}")
        conn.execute("DELETE FROM tenants")


def _tenant(db: Db, *, queued: int, due_for_s: float) -> uuid.UUID:
    tenant = uuid.uuid4()
    db.execute("INSERT INTO tenants (id, name) VALUES (%s, 'deliveries')", (tenant,))
    db.execute(_QUEUE, {"tenant": tenant, "n": queued, "due_for_s": due_for_s})
    return tenant


def _claim(
    url: str,
    limit: int,
    *,
    per_endpoint: int = 100,
    per_tenant: int = 100,
    tenants_in_flight: Mapping[uuid.UUID, int] | None = None,
    **how: Any,
) -> list[Claimed]:
    async def claim() -> list[Claimed]:
        settings = Settings.model_validate({"DATABASE_URL": url})
        opened = open_database(settings, application_name="delivery claims")
        async with opened as db, db.connection() as conn:
            return await deliveries.claim(
                conn,
                owner="worker:test",
                lease_s=30,
                limit=limit,
                per_endpoint=per_endpoint,
                in_flight={},
                per_tenant=per_tenant,
                tenants_in_flight=tenants_in_flight or {},
                **how,
            )

    return asyncio.run(claim())


def _due_tenants(url: str) -> set[uuid.UUID]:
    async def read() -> list[uuid.UUID]:
        settings = Settings.model_validate({"DATABASE_URL": url})
        opened = open_database(settings, application_name="delivery claims")
        async with opened as db, db.connection() as conn:
            return await deliveries.due_tenants(conn)

    return set(asyncio.run(read()))


def test_a_tenant_with_a_big_backlog_does_not_starve_another(
    claims_db: Db, claims_url: str
) -> None:
    # A's backlog is older than B's two, and A is asked first: one claim across tenants in
    # due order took ten of A's and left B waiting behind all of them; A's share is half.
    a = _tenant(claims_db, queued=50, due_for_s=600)
    b = _tenant(claims_db, queued=2, due_for_s=60)

    def a_first(tenants: list[uuid.UUID]) -> None:
        tenants.sort(key=lambda t: t != a)

    claimed = _claim(claims_url, 10, tenants=KeptTenants(refresh_s=0, shuffle=a_first))
    by_tenant = [c.event.tenant_id for c in claimed]
    assert (by_tenant.count(a), by_tenant.count(b)) == (8, 2)
    # Leased to the worker, each with the fence it was claimed with.
    leased = claims_db.execute(
        "SELECT id, fence FROM webhook_deliveries WHERE lease_owner = 'worker:test'"
    ).fetchall()
    assert {(row["id"], row["fence"]) for row in leased} == {(c.id, c.fence) for c in claimed}


def test_a_tenant_at_its_cap_here_takes_nothing_and_leaves_its_share(
    claims_db: Db, claims_url: str
) -> None:
    a = _tenant(claims_db, queued=20, due_for_s=600)
    b = _tenant(claims_db, queued=20, due_for_s=60)
    claimed = _claim(claims_url, 10, per_tenant=4, tenants_in_flight={a: 4})
    assert [c.event.tenant_id for c in claimed] == [b] * 4
    claimed = _claim(claims_url, 10, per_tenant=4, tenants_in_flight={a: 1})
    by_tenant = [c.event.tenant_id for c in claimed]
    assert (by_tenant.count(a), by_tenant.count(b)) == (3, 4)


@pytest.mark.parametrize("cap", ["per_endpoint", "per_tenant"])
def test_a_tenant_asked_again_for_the_room_left_stays_within_its_caps(
    claims_db: Db, claims_url: str, cap: str
) -> None:
    # A fills its first share (3) and is asked again for the room the others left (4): what
    # it took the first time counts against its endpoint's and its tenant's cap.
    a = _tenant(claims_db, queued=20, due_for_s=600)
    b = _tenant(claims_db, queued=1, due_for_s=60)
    c = _tenant(claims_db, queued=1, due_for_s=60)

    def a_first(tenants: list[uuid.UUID]) -> None:
        tenants.sort(key=lambda t: t != a)

    kept = KeptTenants(refresh_s=0, shuffle=a_first)
    caps = {"per_endpoint": 100, "per_tenant": 100} | {cap: 4}
    claimed = _claim(
        claims_url,
        9,
        tenants=kept,
        per_endpoint=caps["per_endpoint"],
        per_tenant=caps["per_tenant"],
    )
    by_tenant = [d.event.tenant_id for d in claimed]
    assert (by_tenant.count(a), by_tenant.count(b), by_tenant.count(c)) == (4, 1, 1)


def test_tenants_without_due_deliveries_are_not_found(claims_db: Db, claims_url: str) -> None:
    later = _tenant(claims_db, queued=3, due_for_s=-600)
    due = _tenant(claims_db, queued=1, due_for_s=60)
    assert _due_tenants(claims_url) == {due}
    assert {c.event.tenant_id for c in _claim(claims_url, 10)} == {due}
    assert later not in _due_tenants(claims_url)


def test_the_tenants_claims_go_together_in_one_round_trip(claims_db: Db, claims_url: str) -> None:
    # Room for one each: every tenant's statement is sent in one pipeline, and the round
    # trip's statements commit together (one transaction: one xmin on the rows it leased).
    tenants = [_tenant(claims_db, queued=2, due_for_s=60) for _ in range(4)]
    claimed = _claim(claims_url, 4)
    assert sorted(c.event.tenant_id for c in claimed) == sorted(tenants)
    rows = claims_db.execute(
        "SELECT DISTINCT xmin::text AS xmin FROM webhook_deliveries WHERE id = ANY(%s)",
        ([c.id for c in claimed],),
    ).fetchall()
    assert len(rows) == 1
