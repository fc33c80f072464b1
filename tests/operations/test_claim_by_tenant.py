"""The worker's claim, tenant by tenant (`leases.claim_due`), on a database of its own.

Which tenants have due work is read without a lock, then each tenant's claim is its own
statement scoped by `tenant_id` (docs/scaling.md): every tenant with due work gets a share,
whatever another's backlog; an in-flight operation whose lease was given back is found
beside live leases of its tenant; each reference carries its tenant. And the plans: each
tenant's claim reads its own range of the worker's partial indexes, and which tenants have
due work is one probe of them per tenant.

A database of the module's own: the claim takes whatever is due, so other tests' operations
in the session's database would take shares here.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

from app.db.database import open_database
from app.db.migrate import upgrade_head
from app.jobs.tenants import KeptTenants
from app.operations import leases, retention
from app.operations.horizon import read_horizon
from app.operations.values import DueRef
from app.settings import Settings
from tests.support.control.database import throwaway_database
from tests.support.fixtures.plans import plan, plan_nodes, seeded_at

Db = psycopg.Connection[DictRow]

_INSERT = """
    INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                            state, lease_owner, lease_expires_at, next_check_at, attempts)
    SELECT gen_random_uuid(), %(tenant)s, 'create_payment', 'key-' || gen_random_uuid(), 'f',
           %(state)s, %(owner)s, now() + make_interval(secs => %(lease_in_s)s),
           now() - make_interval(secs => %(due_for_s)s) + make_interval(secs => g), 1
    FROM generate_series(1, %(n)s) AS g
"""


@pytest.fixture(scope="module")
def claims_url(database_url: str) -> Iterator[str]:
    with throwaway_database(database_url, "payments_claims") as url:
        upgrade_head(url)
        yield url


@pytest.fixture
def claims_db(claims_url: str) -> Iterator[Db]:
    with psycopg.connect(claims_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn
        conn.execute("DELETE FROM operations")
        conn.execute("DELETE FROM idempotency_keys")
        conn.execute("DELETE FROM tenants")


def _tenant(db: Db) -> uuid.UUID:
    tenant = uuid.uuid4()
    db.execute("INSERT INTO tenants (id, name) VALUES (%s, 'claims')", (tenant,))
    return tenant


def _unknown(db: Db, tenant: uuid.UUID, n: int, *, due_for_s: float = 60) -> None:
    """`n` unknown operations of `tenant`, due for about `due_for_s` seconds (not yet, when
    negative)."""
    params = {"tenant": tenant, "state": "UNKNOWN_REQUIRES_RECOVERY", "owner": None}
    db.execute(_INSERT, params | {"lease_in_s": None, "due_for_s": due_for_s, "n": n})


def _in_flight(db: Db, tenant: uuid.UUID, *, lease_in_s: float | None) -> None:
    """One in-flight operation of `tenant`, its lease ending in `lease_in_s` (None: given
    back)."""
    params = {"tenant": tenant, "state": "PROVIDER_REQUEST_SENT", "due_for_s": None}
    owner = None if lease_in_s is None else "api:someone"
    db.execute(_INSERT, params | {"owner": owner, "lease_in_s": lease_in_s, "n": 1})


def _claim(url: str, limit: int, **how: Any) -> list[DueRef]:
    async def claim() -> list[DueRef]:
        settings = Settings.model_validate({"DATABASE_URL": url})
        opened = open_database(settings, application_name="claims")
        async with opened as db, db.connection() as conn:
            return await leases.claim_due(conn, owner="worker:test", lease_s=30, limit=limit, **how)

    return asyncio.run(claim())


def _due_tenants(url: str) -> set[uuid.UUID]:
    async def read() -> list[uuid.UUID]:
        settings = Settings.model_validate({"DATABASE_URL": url})
        opened = open_database(settings, application_name="claims")
        async with opened as db, db.connection() as conn:
            return await leases.due_tenants(conn, await read_horizon(conn))

    return set(asyncio.run(read()))


def test_every_tenant_with_due_work_gets_a_share_whatever_another_holds(
    claims_db: Db, claims_url: str
) -> None:
    # A's backlog is older than B's two, and A is asked first: one claim across tenants,
    # oldest first, took ten of A's and left B waiting behind all of them; A's share is half.
    a, b = _tenant(claims_db), _tenant(claims_db)
    _unknown(claims_db, a, 30, due_for_s=600)
    _unknown(claims_db, b, 2, due_for_s=60)

    def a_first(tenants: list[uuid.UUID]) -> None:
        tenants.sort(key=lambda t: t != a)

    claimed = _claim(claims_url, 10, tenants=KeptTenants(refresh_s=0, shuffle=a_first))
    by_tenant = [due.ref.tenant_id for due in claimed]
    assert (by_tenant.count(a), by_tenant.count(b)) == (8, 2)


def test_each_reference_carries_its_tenant_and_the_new_fence(
    claims_db: Db, claims_url: str
) -> None:
    a = _tenant(claims_db)
    _unknown(claims_db, a, 1)
    (due,) = _claim(claims_url, 10)
    row = claims_db.execute(
        "SELECT tenant_id, fence, lease_owner FROM operations WHERE id = %s", (due.ref.id,)
    ).fetchone()
    assert row == {"tenant_id": a, "fence": 2, "lease_owner": "worker:test"}
    assert (due.ref.tenant_id, due.ref.fence, due.operation_name) == (a, 2, "create_payment")


def test_an_operation_whose_lease_was_given_back_is_found_beside_live_leases(
    claims_db: Db, claims_url: str
) -> None:
    # The tenant's earliest lease is live; the released one (NULL) must still count: the
    # index sorts it first.
    c = _tenant(claims_db)
    _in_flight(claims_db, c, lease_in_s=300)
    _in_flight(claims_db, c, lease_in_s=None)
    assert _due_tenants(claims_url) == {c}
    (due,) = _claim(claims_url, 10)
    assert due.ref.tenant_id == c


def test_tenants_without_due_work_are_not_found(claims_db: Db, claims_url: str) -> None:
    live, later, due = _tenant(claims_db), _tenant(claims_db), _tenant(claims_db)
    _in_flight(claims_db, live, lease_in_s=300)
    _unknown(claims_db, later, 3, due_for_s=-600)
    _unknown(claims_db, due, 1)
    _in_flight(claims_db, due, lease_in_s=-1)
    assert _due_tenants(claims_url) == {due}
    assert {d.ref.tenant_id for d in _claim(claims_url, 10)} == {due}
    # Claimed: its leases are live now, so nothing of it is due.
    assert _due_tenants(claims_url) == set()


def test_the_tenants_claims_go_together_in_one_round_trip(claims_db: Db, claims_url: str) -> None:
    # Room for one each: every tenant's statement is sent in one pipeline, and the round
    # trip's statements commit together (one transaction: one xmin on the rows it leased).
    tenants = [_tenant(claims_db) for _ in range(4)]
    for tenant in tenants:
        _unknown(claims_db, tenant, 2)
    claimed = _claim(claims_url, 4)
    assert sorted(due.ref.tenant_id for due in claimed) == sorted(tenants)
    rows = claims_db.execute(
        "SELECT DISTINCT xmin::text AS xmin FROM operations WHERE id = ANY(%s)",
        ([due.ref.id for due in claimed],),
    ).fetchall()
    assert len(rows) == 1


# The plans, on the seeded database of the plan tests (tests/support/fixtures/plans.py),
# for one of its ten tenants.
TENANT = uuid.UUID(hashlib.md5(b"tenant3").hexdigest())


# The partition of `operations` holding the plan database's seeded month.
LEGACY = "operations_legacy"
# Every day of the seeded month: the plan's shape, not which days it reads
# (tests/partitions/test_pruning.py reads that).
SINCE = datetime(2000, 1, 1, tzinfo=UTC)


def _claim_params() -> dict[str, Any]:
    return {"tenant_id": TENANT, "owner": "worker:plan", "lease_s": 30, "limit": 16, "since": SINCE}


def test_a_tenants_claim_reads_its_own_range_of_the_partial_indexes(plan_db: Db) -> None:
    explained = plan(plan_db, leases._CLAIM_DUE, _claim_params())
    partials = ("ix_operations_in_flight_lease", "ix_operations_recovery_due")
    for index in partials:
        assert f"Index Scan using {index}" in explained, explained
    # `operations` is partitioned by day: each partition is probed the same way; the
    # seeded month is in the legacy one (the days after it are near empty, and the planner
    # may read those by any index).
    scans = [
        n
        for n in plan_nodes(plan_db, leases._CLAIM_DUE, _claim_params())
        if "Index Name" in n and n.get("Relation Name") == LEGACY
    ]
    partial = [n for n in scans if n["Index Name"] in partials]
    assert len(partial) == 2, explained
    for node in partial:
        assert "tenant_id =" in node["Index Cond"], explained
    # The rows picked are changed by their key, one probe each.
    (change,) = [n for n in scans if n not in partial]
    assert "id = picked.id" in change["Index Cond"], explained
    assert "Seq Scan" not in explained, explained
    # No sort assertion: with `operations` partitioned by day, the planner merges the days
    # in the index's order (MergeAppend) when each day holds rows, but just after midnight,
    # today's partition nearly empty, it may append them and sort the tenant's due rows
    # (a top-N sort under the claim's LIMIT). Which it picks depends on the hour.


def test_which_tenants_have_due_work_is_one_probe_of_each_index_per_tenant(
    plan_db: Db,
) -> None:
    explained = plan(plan_db, leases._DUE_TENANTS, {"since": SINCE})
    assert "Seq Scan" not in explained, explained
    probes = [
        n
        for n in plan_nodes(plan_db, leases._DUE_TENANTS, {"since": SINCE})
        if "Index Name" in n and n.get("Relation Name") == LEGACY
    ]
    assert {n["Index Name"] for n in probes} == {
        "ix_operations_in_flight_lease",
        "ix_operations_recovery_due",
    }, explained
    # Each step of the loose scan starts after the last tenant found, and takes one entry.
    steps = [n for n in probes if "tenant_id >" in n.get("Index Cond", "")]
    assert len(steps) == 2, explained


def test_the_expire_jobs_tenant_statement_reads_its_rows_by_key(plan_db: Db) -> None:
    # A row due a TTL after its completion: of a day before today's (the seed's legacy
    # partition; today the seeding's day, whatever the clock's), named with its id.
    days = [seeded_at(plan_db) - timedelta(days=2)]
    params = {"tenant_id": TENANT, "ids": [uuid.uuid4()], "days": days, "ttl_s": 86400}
    for step in (retention._DROP_RESPONSES, retention._RELEASE_KEYS):
        explained = plan(plan_db, step.batch, params)
        # Its rows by key: by id through the primary key, or by tenant and the rows' days
        # (ix_operations_tenant_created), on those days' partitions alone.
        keyed = ("pk_operations", "ix_operations_tenant_created")
        assert any(index in explained for index in keyed), explained
        assert explained.count("Update on operations_") == 1, explained
        assert "Seq Scan" not in explained, explained
        due = plan(plan_db, step.due, {"ttl_s": 86400, "limit": 500})
        assert "ix_operations_response_expiry" in due or "ix_operations_tombstone_release" in due
        # In index order: a Merge Append of the partitions' index scans, no Sort node.
        sorts = [
            n
            for n in plan_nodes(plan_db, step.due, {"ttl_s": 86400, "limit": 500})
            if n["Node Type"] == "Sort"
        ]
        assert sorts == [], due
