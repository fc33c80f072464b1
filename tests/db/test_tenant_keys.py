"""Every unique key and every index leads with `tenant_id`, read from the live catalog.

The schema must stay distributable by tenant (docs/scaling.md): on Citus every table that
holds tenant data is distributed by `tenant_id`, and a unique key or index that does not
lead with it cannot be enforced per shard or sends a query to every shard. The check reads
`pg_index` and `pg_constraint` for every table of the migrated schema, so a table added by a
new migration is checked without anyone listing it here. What does not follow the rule is
named below, each with the reason; anything else fails the test.

Rules, as docs/scaling.md states them:
- A table holds tenant data and has a `tenant_id` column, unless it is a reference table
  (small, read across tenants, replicated to every node on Citus).
- A primary key on a single surrogate `id` (a random UUID or an identity the service mints)
  is accepted: the id is unique by construction, and every read by it is scoped by tenant.
  On Citus it would become `(tenant_id, id)`. On a partitioned table the key must hold the
  partition column too: `(id, <partition column>)` is the same key (docs/scaling.md, "Time
  partitions").
- A partition has the keys and indexes of its partitioned table: the table is checked.
- Every other unique index, and every other index, leads with `tenant_id`, unless it is
  allowed below.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import psycopg
from psycopg.rows import DictRow

# Small tables read across tenants (authentication finds the tenant from the key): Citus
# reference tables, copied to every node.
REFERENCE_TABLES: dict[str, str] = {
    "alembic_version": "Alembic's bookkeeping",
    "tenants": "the tenants themselves; each is its own distribution key",
    "api_keys": "looked up by key hash before the tenant is known",
    # Operators are not tenants: their tokens and console sessions belong to no tenant.
    "admin_tokens": "operators' tokens, looked up by hash; no tenant",
    "console_sessions": "operators' console logins; no tenant",
    # Where publishing events to a broker's exchange began: one row per exchange, read by
    # the publishing workers across tenants (each tenant's cursor leads with tenant_id).
    "event_publications": "the exchanges events are published to, one row each; no tenant",
}

# Settlement reconciliation's tables hold the provider account's books, which know no
# tenant (an orphan charge has none): read and written across tenants by the daily run and
# the operators' queue only. On Citus they stay local tables on the coordinator.
PROVIDER_BOOKS_TABLES: dict[str, str] = {
    "settlement_days": "the days run, one row each",
    "settlement_lines": "the providers' settled lines, by provider and record id",
    "reconciliation_items": "differences between our books and the provider's, by its key",
    "reconciliation_item_changes": "the items' audit trail, reached by item id",
}

# Providers' notifications arrive before any tenant is known: the inbox is keyed by the
# provider's event id (unique (provider, event_id)) and scanned by the apply step across
# tenants (partial ix_provider_events_due); the tenant is found when an event is applied.
# On Citus it stays a local table on the coordinator, as the provider's books do.
PROVIDER_INBOX_TABLES: dict[str, str] = {
    "provider_events": "providers' events by provider and event id; no tenant until applied",
}

# Tables of tenant data without their own `tenant_id` column: none. The audit trail was one
# until migration 0028 gave it the operation's tenant, written by the verb that audits.
NO_TENANT_COLUMN: dict[str, str] = {}

# Indexes on tenant data that do not lead with `tenant_id`, and why.
NOT_TENANT_LEADING: dict[str, str] = {
    # The expire job's scans find what is due across all tenants, oldest first; on Citus each
    # shard answers from its own partial index (a fan-out by design), and each tenant's rows
    # are then changed by a statement of their own (app/operations/retention.py). The
    # worker's recovery scans, the hold expiry's and the webhook claim's lead with
    # tenant_id: those claims run tenant by tenant.
    "ix_operations_response_expiry": "expire job scan: terminal operations by age",
    "ix_operations_tombstone_release": "expire job scan: tombstones by age",
    "ix_webhook_deliveries_due": "worker scan: deliveries due, across tenants",
    # The operators' lists read across tenants by design (a tenant filter uses
    # ix_operations_tenant_created, which leads with tenant_id).
    "ix_operations_needs_attention": "admin list: flagged operations, oldest first",
    "ix_operations_state_created": "admin list: operations in a state, oldest first",
    "ix_webhook_deliveries_failed": "admin list: failed deliveries, newest first",
    # The operators' search (app/admin/search.py): a support request names a key, not its
    # tenant. On Citus each is a fan-out of one index probe per shard, rare by design.
    "ix_operations_idempotency_key": "operators' search: an idempotency key, any tenant",
    "ix_payments_provider_charge_id": "operators' search: the provider's charge id",
    "ix_payments_merchant_reference": "operators' search: the merchant's reference",
    "ix_payments_account_created": "operators' search: an account's payments, newest first",
    "ix_refunds_provider_refund_id": "operators' search: the provider's refund id",
    "ix_payment_modifications_provider_reference": "operators' search: a capture or void id",
    # The operators' lists of payments and refunds across tenants, newest first (a tenant
    # filter uses ix_payments_tenant_created / ix_refunds_tenant_created, tenant-leading).
    "ix_payments_created": "admin list: payments across tenants, newest first",
    "ix_refunds_created": "admin list: refunds across tenants, newest first",
    "ix_payment_modifications_created": "admin list: captures and voids, newest first",
    "ix_payments_status_created": "admin list: payments in a status, newest first",
    # The dashboard's charts read a window across tenants (app/admin/activity.py).
    "ix_operation_transitions_recovery": "dashboard: entries into recovery (partial)",
    "ix_webhook_attempts_attempted_brin": "dashboard: a window's delivery attempts (BRIN)",
    "ix_payment_failovers_created_at": "dashboard: a window's failovers",
    # 1:1 links between rows whose ids the service mints as random UUIDs: unique by
    # construction, never a business key. On Citus they become (tenant_id, ...) and the
    # lookups by operation id gain the tenant (docs/scaling.md, "what would change").
    # A payment's hold the partition column too (`payments` is partitioned by day).
    "uq_payments_operation_id_created_at": "the operation's random id, minted with the claim",
    "uq_payments_provider_key_created_at": "derived from the payment's random id",
    "uq_refunds_operation_id": "the operation's random id, minted with the claim",
    "uq_refunds_provider_key": "derived from the refund's random id",
    "uq_payment_modifications_operation_id": "the operation's random id, minted with the claim",
    "uq_payment_modifications_provider_key": "derived from the capture's or void's random id",
    "ix_operation_transitions_operation_id": "the audit trail by operation (see above)",
    "ix_webhook_attempts_delivery_id": "a delivery's attempts, read through the delivery",
    # A settlement run reads one day's payments and refunds across tenants (BRIN: a few
    # pages, almost free per insert; docs/settlement.md).
    "ix_payments_created_at_brin": "settlement run: a day's payments, across tenants",
    "ix_refunds_created_at_brin": "settlement run: a day's refunds, across tenants",
    "ix_payment_modifications_created_at_brin": "settlement run: a day's captures",
}

_INDEXES = """
    SELECT c.relname AS table_name, i.relname AS index_name, x.indisunique AS is_unique,
           x.indisprimary AS is_primary, x.indnatts AS columns,
           (SELECT a.attname FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum = x.indkey[0]) AS first_column,
           (SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum = x.indkey[0]) AS first_type,
           (SELECT a.attname FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum = x.indkey[1]) AS second_column,
           (SELECT a.attname FROM pg_partitioned_table p
             JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
             WHERE p.partrelid = c.oid) AS partition_column
    FROM pg_index x
    JOIN pg_class c ON c.oid = x.indrelid
    JOIN pg_class i ON i.oid = x.indexrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    ORDER BY 1, 2
"""
# Unique and exclusion constraints too: each is backed by an index, but say so explicitly.
_CONSTRAINTS = """
    SELECT c.relname AS table_name, k.conname AS name, k.contype AS kind,
           (SELECT a.attname FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum = k.conkey[1]) AS first_column
    FROM pg_constraint k
    JOIN pg_class c ON c.oid = k.conrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND k.contype IN ('u', 'x') AND NOT c.relispartition
"""
_TABLES = """
    SELECT c.relname AS table_name,
           EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = c.oid
                   AND a.attname = 'tenant_id' AND NOT a.attisdropped) AS has_tenant
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') AND NOT c.relispartition
"""


@dataclass(frozen=True)
class Allowances:
    reference_tables: frozenset[str]
    no_tenant_column: frozenset[str]
    not_tenant_leading: frozenset[str]


SCHEMA_ALLOWANCES = Allowances(
    frozenset(REFERENCE_TABLES)
    | frozenset(PROVIDER_BOOKS_TABLES)
    | frozenset(PROVIDER_INBOX_TABLES),
    frozenset(NO_TENANT_COLUMN),
    frozenset(NOT_TENANT_LEADING),
)


def violations(conn: psycopg.Connection[DictRow], schema: str, allow: Allowances) -> list[str]:
    """What in `schema` breaks the tenant rules, one line each."""
    found: list[str] = []
    params = {"schema": schema}
    for table in conn.execute(_TABLES, params).fetchall():
        name = table["table_name"]
        if name in allow.reference_tables or name in allow.no_tenant_column:
            continue
        if not table["has_tenant"]:
            found.append(f"table {name} has no tenant_id column")
    for index in conn.execute(_INDEXES, params).fetchall():
        if index["table_name"] in allow.reference_tables:
            continue
        if index["is_primary"] and index["columns"] == 1 and index["first_column"] == "id":
            continue  # a surrogate id minted by the service
        if (
            index["is_primary"]
            and index["columns"] == 2
            and index["first_column"] == "id"
            and index["second_column"] == index["partition_column"]
        ):
            continue  # the surrogate id, with the partition column a partitioned key needs
        if index["first_column"] == "tenant_id":
            continue
        if index["index_name"] not in allow.not_tenant_leading:
            kind = "unique index" if index["is_unique"] else "index"
            found.append(
                f"{kind} {index['index_name']} on {index['table_name']} leads with "
                f"{index['first_column'] or 'an expression'}, not tenant_id"
            )
    for constraint in conn.execute(_CONSTRAINTS, params).fetchall():
        if constraint["table_name"] in allow.reference_tables:
            continue
        if constraint["first_column"] == "tenant_id":
            continue
        if constraint["name"] not in allow.not_tenant_leading:
            found.append(
                f"constraint {constraint['name']} on {constraint['table_name']} "
                "does not lead with tenant_id"
            )
    return sorted(set(found))


def test_every_key_and_index_leads_with_tenant_id(db: psycopg.Connection[DictRow]) -> None:
    found = violations(db, "public", SCHEMA_ALLOWANCES)
    assert found == [], "\n".join(found)


def test_every_allowance_still_names_something(db: psycopg.Connection[DictRow]) -> None:
    # A stale entry would silently allow a future index of the same name.
    indexes = {r["index_name"] for r in db.execute(_INDEXES, {"schema": "public"}).fetchall()}
    tables = {r["table_name"] for r in db.execute(_TABLES, {"schema": "public"}).fetchall()}
    assert set(NOT_TENANT_LEADING) <= indexes, set(NOT_TENANT_LEADING) - indexes
    allowed = set(REFERENCE_TABLES) | set(PROVIDER_BOOKS_TABLES) | set(PROVIDER_INBOX_TABLES)
    assert allowed | set(NO_TENANT_COLUMN) <= tables


def test_the_check_finds_what_breaks_the_rules(db: psycopg.Connection[DictRow]) -> None:
    schema = f"tenant_rules_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE SCHEMA {schema}")
    try:
        db.execute(
            f"CREATE TABLE {schema}.refunds (id uuid PRIMARY KEY, tenant_id uuid,"
            " provider_key text UNIQUE, created_at timestamptz)"
        )
        db.execute(f"CREATE INDEX ix_refunds_created ON {schema}.refunds (created_at)")
        db.execute(f"CREATE INDEX ix_refunds_tenant ON {schema}.refunds (tenant_id, created_at)")
        db.execute(f"CREATE TABLE {schema}.events (seq bigint PRIMARY KEY, body text)")
        db.execute(f"CREATE UNIQUE INDEX ix_events_lower ON {schema}.events (lower(body))")
        # Partitioned by day: (id, day) is the surrogate key; (other, day) is not. The
        # partitions are not checked again.
        for name, key in (("trail", "id, day"), ("notes", "other, day")):
            db.execute(
                f"CREATE TABLE {schema}.{name} (id bigint, tenant_id uuid, day timestamptz,"
                f" other bigint, PRIMARY KEY ({key})) PARTITION BY RANGE (day)"
            )
            db.execute(
                f"CREATE TABLE {schema}.{name}_legacy PARTITION OF {schema}.{name}"
                " FOR VALUES FROM (MINVALUE) TO ('2026-01-01')"
            )
        nothing_allowed = Allowances(frozenset(), frozenset(), frozenset())
        assert violations(db, schema, nothing_allowed) == [
            "constraint refunds_provider_key_key on refunds does not lead with tenant_id",
            "index ix_refunds_created on refunds leads with created_at, not tenant_id",
            "table events has no tenant_id column",
            "unique index events_pkey on events leads with seq, not tenant_id",
            "unique index ix_events_lower on events leads with an expression, not tenant_id",
            "unique index notes_pkey on notes leads with other, not tenant_id",
            "unique index refunds_provider_key_key on refunds leads with provider_key, "
            "not tenant_id",
        ]
    finally:
        db.execute(f"DROP SCHEMA {schema} CASCADE")
