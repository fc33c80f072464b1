"""Every write the service sends to a tenant's rows names the tenant, read from the server.

The schema is distributable by tenant (docs/scaling.md, `test_tenant_keys.py`), and so must
the statements be: on Citus a statement that writes or locks rows of a distributed table
runs only when it routes to one shard group, so its WHERE clause holds `tenant_id = <a
value>`. Here the service runs as it does (its own API and worker processes, the fake
provider) on a PostgreSQL server of the test's own with `pg_stat_statements` loaded, as a
role of its own: a payment, a refund, a capture and a void, a payment recovered by the
worker and one by the client's retry, each event delivered to the tenant's webhook endpoint
(the deliveries' claim, each attempt's record), then the expire job on a lapsed hold and on
keys past both TTLs. Every
statement that role sent is then read back from `pg_stat_statements` and taken apart
(`tests/support/readers/statements.py`): each UPDATE, DELETE and locking SELECT of a
tenant table must hold the tenant condition among its top-level conditions, each INSERT
must name `tenant_id`. The tenant tables are read from the catalog (every table with a
`tenant_id` column but the reference tables of `test_tenant_keys.py`), so a new one is
checked without being listed.

What still spans tenants is named below with the reason, as the schema's allowances are;
each entry must still match a statement the run sent, so none outlives its reason.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

from app.db.embedded import EmbeddedPostgres
from app.db.migrate import upgrade_head
from app.partitions.layout import PARTITIONED
from tests.db.test_tenant_keys import SCHEMA_ALLOWANCES
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.receivers import start_receiver
from tests.support.control.system import FAST_WORKER, start_api, start_worker
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.refunds import paid, post_refund
from tests.support.factories.tenants import api_client, make_tenant
from tests.support.factories.webhooks import create_endpoint
from tests.support.readers.statements import Write, writes

SERVICE_ROLE = "payments_service"

# Statements that still write or lock across tenants (docs/scaling.md, "What is still on
# paper"), by a fragment of their text as pg_stat_statements keeps it, and why. None left:
# the hold expiry and the webhook deliveries' claim run tenant by tenant.
SPANS_TENANTS: dict[str, str] = {}

_TENANT_TABLES = """
    SELECT c.relname AS name FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
      AND EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = c.oid
                  AND a.attname = 'tenant_id' AND NOT a.attisdropped)
"""
_SENT = """
    SELECT s.query FROM pg_stat_statements s
    JOIN pg_roles r ON r.oid = s.userid
    JOIN pg_database d ON d.oid = s.dbid
    WHERE r.rolname = %s AND d.datname = current_database()
"""


@pytest.fixture(scope="module")
def tracked_server() -> Iterator[EmbeddedPostgres]:
    """A server of this module's own, with pg_stat_statements loaded and the service's role;
    migrated to head."""
    # Not under pytest's temp folder (tests/support/control/database.py says why).
    data_dir = Path(tempfile.mkdtemp(prefix="payments-tenant-writes-"))
    server = EmbeddedPostgres(data_dir, durable=False, database="payments_tenant_writes")
    try:
        server.start()
        with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            conn.execute(f"CREATE ROLE {SERVICE_ROLE} LOGIN SUPERUSER")
        server.stop()
        server.start()
        upgrade_head(server.url())
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        yield server
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def sent(
    tracked_server: EmbeddedPostgres,
    base_env: dict[str, str],
    work_dir: Path,
    provider: Process,
) -> list[str]:
    """Every statement the service's processes sent while doing each thing once."""
    assert tracked_server.port is not None
    assert provider.url is not None
    service_url = (
        f"postgresql://{SERVICE_ROLE}@127.0.0.1:{tracked_server.port}/payments_tenant_writes"
    )
    env = {**base_env, "DATABASE_URL": service_url}
    faults = FaultInjector(provider.url)
    with psycopg.connect(tracked_server.url(), autocommit=True, row_factory=dict_row) as db:
        db.execute("SELECT pg_stat_statements_reset()")
        api = start_api(work_dir / "logs", env)
        receiver = start_receiver(work_dir / "logs", work_dir / "tenant-writes-received.jsonl")
        try:
            tenant = make_tenant(db, "tenant writes")
            with api_client(api, tenant) as client:
                # Every event of the run is delivered to it by the worker below.
                create_endpoint(client, f"http://127.0.0.1:{receiver.port}")
                _run_every_path(client, db, faults)
                # A hold that lapsed: the expire job's first batch job expires it.
                hold = authorized(client)
                db.execute(
                    "UPDATE payments SET capture_before = now() - interval '1 minute'"
                    " WHERE id = %s",
                    (hold["payment_id"],),
                )
        finally:
            api.stop()
        # The expire job's both steps: keys past the key TTL and the tombstone TTL.
        db.execute(
            "UPDATE operations SET completed_at = now() - interval '40 days'"
            " WHERE tenant_id = %s AND state IN ('COMPLETED', 'FAILED')",
            (tenant.id,),
        )
        try:
            worker = start_worker(work_dir / "logs", {**env, **FAST_WORKER}, once=True)
            assert worker.wait_exit(timeout=120) == 0, worker.log()
        finally:
            receiver.process.stop()
        # Every operation final, every old key released: the worker did both jobs.
        left = db.execute(
            "SELECT count(*) AS n FROM operations WHERE tenant_id = %s"
            " AND (state NOT IN ('COMPLETED', 'FAILED')"
            "      OR (idempotency_key IS NOT NULL"
            "          AND completed_at < now() - interval '30 days'))",
            (tenant.id,),
        ).fetchone()
        assert left == {"n": 0}, worker.log()
        # The hold expired, and the events were delivered (claimed, sent, recorded): all
        # but the expiry's own, written after the worker's delivery pass.
        done = db.execute(
            "SELECT (SELECT count(*) FROM payments WHERE tenant_id = %(t)s"
            "        AND status = 'EXPIRED') AS expired,"
            "       (SELECT count(*) FROM webhook_deliveries WHERE tenant_id = %(t)s"
            "        AND status = 'succeeded') AS delivered,"
            "       (SELECT count(*) FROM webhook_attempts WHERE tenant_id = %(t)s) AS attempts",
            {"t": tenant.id},
        ).fetchone()
        assert done is not None
        assert done["expired"] == 1, worker.log()
        assert done["delivered"] > 0, worker.log()
        assert done["attempts"] >= done["delivered"], worker.log()
        return [row["query"] for row in db.execute(_SENT, (SERVICE_ROLE,)).fetchall()]


def _run_every_path(
    client: httpx.Client, db: psycopg.Connection[DictRow], faults: FaultInjector
) -> None:
    # A payment, a refund of it.
    payment = paid(client)
    refunded = post_refund(client, payment["payment_id"], key=new_key())
    assert refunded.status_code == 201, refunded.text
    # A capture, a void.
    captured = post_capture(client, authorized(client)["payment_id"])
    assert captured.status_code == 201, captured.text
    voided = post_void(client, authorized(client)["payment_id"])
    assert voided.status_code == 201, voided.text
    # Two whose answer is lost: one the worker recovers, one the client's retry does.
    keys = []
    for _ in range(2):
        key, body = new_key(), payment_body()
        faults.add("error_after_commit", account_id=body["account_id"])
        lost = post_payment(client, body, key=key)
        assert lost.status_code == 202, lost.text
        keys.append((key, body))
    db.execute(
        "UPDATE operations SET next_check_at = now()"
        " WHERE idempotency_key = ANY(%s) AND state = 'UNKNOWN_REQUIRES_RECOVERY'",
        ([key for key, _ in keys],),
    )
    key, body = keys[1]
    retried = post_payment(client, body, key=key)
    assert retried.status_code == 201, retried.text


def tenant_tables(conn: psycopg.Connection[DictRow]) -> set[str]:
    """Tables of tenant data: a `tenant_id` column, and no reference table."""
    names = {row["name"] for row in conn.execute(_TENANT_TABLES).fetchall()}
    return names - SCHEMA_ALLOWANCES.reference_tables


def unscoped(statements: list[str], tables: set[str]) -> list[tuple[str, Write]]:
    """Each write or lock of a tenant table that does not name its tenant, with its
    statement."""
    return [
        (sql, write)
        for sql in statements
        for write in writes(sql)
        if write.table in tables and not write.scoped
    ]


def test_every_write_of_a_tenants_rows_names_the_tenant(
    sent: list[str], tracked_server: EmbeddedPostgres
) -> None:
    with psycopg.connect(tracked_server.url(), row_factory=dict_row) as conn:
        tables = tenant_tables(conn)
    found = [
        f"{write.verb} {write.table}: {' '.join(sql.split())}"
        for sql, write in unscoped(sent, tables)
        if not any(fragment in sql for fragment in SPANS_TENANTS)
    ]
    assert found == [], "\n\n".join(found)


def test_the_run_wrote_what_each_path_writes(sent: list[str]) -> None:
    # Without these the test above would pass on a run that did nothing.
    made = {(w.verb, w.table) for sql in sent for w in writes(sql)}
    assert {
        ("INSERT", "operations"),
        ("UPDATE", "operations"),
        ("INSERT", "operation_transitions"),
        ("LOCK", "operations"),
        ("INSERT", "payments"),
        ("UPDATE", "payments"),
        ("LOCK", "payments"),
        ("INSERT", "refunds"),
        ("UPDATE", "refunds"),
        ("INSERT", "payment_modifications"),
        ("UPDATE", "payment_modifications"),
        ("INSERT", "events"),
        ("LOCK", "webhook_deliveries"),
        ("UPDATE", "webhook_deliveries"),
        ("INSERT", "webhook_attempts"),
    } <= made, sorted(made)
    # The hold expiry's statement and the deliveries' claim and record were among them.
    for fragment in ("UPDATE payments p", "UPDATE webhook_deliveries AS d", "webhook_attempts"):
        assert any(fragment in sql for sql in sent), fragment


def test_every_allowance_still_matches_a_statement_sent(sent: list[str]) -> None:
    assert [f for f in SPANS_TENANTS if not any(f in sql for sql in sent)] == []


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "WITH changed AS (UPDATE operations SET state = $1 WHERE id = $2"
            " AND tenant_id = $3 AND fence = $4 RETURNING id), audit AS (INSERT INTO"
            " operation_transitions (operation_id, tenant_id) SELECT id, tenant_id FROM"
            " changed), subject AS (UPDATE payments SET status = $5 WHERE id = $6"
            " AND EXISTS (SELECT FROM changed)) SELECT 1",
            [
                Write("UPDATE", "operations", True),
                Write("INSERT", "operation_transitions", True),
                Write("UPDATE", "payments", False),
            ],
        ),
        (
            "UPDATE payments p SET status = $1 WHERE p.id IN (SELECT id FROM payments"
            " WHERE tenant_id = $2 FOR NO KEY UPDATE SKIP LOCKED) AND p.status = $3",
            [Write("UPDATE", "payments", False), Write("LOCK", "payments", True)],
        ),
        (
            "UPDATE operations SET x = $1 WHERE tenant_id = $2 OR id = $3",
            [Write("UPDATE", "operations", False)],
        ),
        (
            "DELETE FROM events WHERE id = $1 AND tenant_id = $2::uuid",
            [Write("DELETE", "events", True)],
        ),
        (
            "INSERT INTO events (id, type) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            [Write("INSERT", "events", False)],
        ),
        (
            "SELECT id FROM operations WHERE state = $1 ORDER BY lease_expires_at"
            " LIMIT $2 FOR UPDATE SKIP LOCKED",
            [Write("LOCK", "operations", False)],
        ),
    ],
)
def test_the_reader_tells_a_scoped_write_from_one_that_spans_tenants(
    sql: str, expected: list[Write]
) -> None:
    assert writes(sql) == expected


def test_an_unscoped_write_of_a_tenant_table_is_found() -> None:
    sql = "UPDATE refunds SET status = $1 WHERE id = $2 AND EXISTS (SELECT FROM changed)"
    assert unscoped([sql], {"refunds"}) == [(sql, Write("UPDATE", "refunds", False))]
    assert unscoped([sql], {"payments"}) == []


def test_tenant_tables_are_read_from_the_catalog(tracked_server: EmbeddedPostgres) -> None:
    with psycopg.connect(tracked_server.url(), row_factory=dict_row) as conn:
        tables = tenant_tables(conn)
        partitioned = {
            row["name"]
            for row in conn.execute(
                "SELECT relname AS name FROM pg_class WHERE relkind = 'p'"
                " AND relnamespace = 'public'::regnamespace"
            ).fetchall()
        }
    # The tables partitioned by day are checked as the tables the statements name.
    catalogue = {layout.table for layout in PARTITIONED}
    assert catalogue == {"operations", "operation_transitions", "payments", "events"}
    assert catalogue <= partitioned
    assert catalogue <= tables
    assert not {"tenants", "api_keys"} & tables
