"""`bench/history_seed.py`: 2,000 payments over 3 days into a database of their own, then
every row checked against what the service writes and reads: the counts per table, each
payment's operation, the three transitions and the event of each operation, the key's
state by its age, the fingerprint a replay computes, the stored answers; and through a
running API, each payment read back and the replayable keys replayed, byte for byte."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import psycopg
import pytest
from alembic import command

from app.db.migrate import alembic_config, upgrade_head
from app.idempotency.fingerprint import fingerprint
from app.payments import replies
from app.payments import repository as payments
from app.payments.rows import PaymentRow
from app.payments.views import payment_json
from app.provider.parsing import Charge
from bench.history import api_key_for
from bench.history_seed import (
    DECLINE_CODE,
    OPERATION,
    REJECTED_DETAIL,
    Plan,
    command_of,
    key_of,
    outcome_of,
    request_body,
    seed,
)
from bench.system import api_env, start_api
from tests.support.control.database import throwaway_database
from tests.support.control.processes import Process

PAYMENTS = 2000
DAYS = 3

STATUS_OF = {"succeeded": "SUCCEEDED", "declined": "DECLINED", "rejected": "FAILED"}


@pytest.fixture(scope="module")
def seeded(database_url: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A migrated database of its own, seeded; its URL and the seeding's figures."""
    with throwaway_database(database_url, "payments_history") as url:
        upgrade_head(url)
        # Chunks of 700: the last one short, so chunk bounds are crossed too.
        yield url, seed(url, payments=PAYMENTS, days=DAYS, chunk=700)


@pytest.fixture(scope="module")
def seeded_api(
    seeded: tuple[str, dict[str, Any]], provider: Process, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Process, dict[uuid.UUID, str]]]:
    """The API on the seeded database, and an API key for each seeded tenant."""
    url, figures = seeded
    keys = {uuid.UUID(tenant): api_key_for(url, uuid.UUID(tenant)) for tenant in figures["tenants"]}
    assert provider.url is not None
    process = start_api(tmp_path_factory.mktemp("history") / "logs", api_env(url, provider.url),
                        workers=1)  # fmt: skip
    yield process, keys
    process.stop()


def _rows(url: str, sql: str) -> list[dict[str, Any]]:
    with psycopg.connect(url) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(sql).fetchall()


def _index(reference: str) -> int:
    prefix, _, index = reference.partition("-")
    assert prefix == "hist"
    return int(index)


def test_every_table_holds_each_payment_once_with_its_operation(
    seeded: tuple[str, dict[str, Any]],
) -> None:
    url, figures = seeded
    tenants = {uuid.UUID(t) for t in figures["tenants"]}
    counts = _rows(
        url,
        "SELECT (SELECT count(*) FROM operations) AS operations,"
        " (SELECT count(*) FROM payments) AS payments,"
        " (SELECT count(*) FROM operation_transitions) AS transitions,"
        " (SELECT count(*) FROM events) AS events",
    )[0]
    assert counts == {
        "operations": PAYMENTS,
        "payments": PAYMENTS,
        "transitions": 3 * PAYMENTS,
        "events": PAYMENTS,
    }
    joined = _rows(
        url,
        "SELECT p.merchant_reference, p.status, p.tenant_id, o.tenant_id AS op_tenant, o.state,"
        " o.response_status, e.type, e.tenant_id AS event_tenant, e.data, p.provider_key,"
        " p.id AS payment_id, p.created_at, o.created_at AS op_created, p.updated_at,"
        " o.completed_at"
        " FROM payments p JOIN operations o ON o.id = p.operation_id"
        " JOIN events e ON e.operation_id = o.id",
    )
    assert len(joined) == PAYMENTS
    seen = set()
    for row in joined:
        index = _index(row["merchant_reference"])
        seen.add(index)
        outcome = outcome_of(index)
        assert row["status"] == STATUS_OF[outcome], row
        assert row["state"] == ("FAILED" if outcome == "rejected" else "COMPLETED")
        assert (
            row["response_status"] == {"succeeded": 201, "declined": 402, "rejected": 502}[outcome]
        )
        assert row["type"] == f"payment.{STATUS_OF[outcome].lower()}"
        assert row["tenant_id"] == row["op_tenant"] == row["event_tenant"]
        assert row["tenant_id"] in tenants
        assert row["provider_key"] == f"payment-{row['payment_id']}"
        assert row["created_at"] == row["op_created"]
        assert row["updated_at"] == row["completed_at"] > row["created_at"]
        assert row["data"]["payment_id"] == str(row["payment_id"])
        assert row["data"]["status"] == row["status"]
    assert seen == set(range(PAYMENTS))
    # Spread over the days, over every tenant.
    first, last = min(r["created_at"] for r in joined), max(r["created_at"] for r in joined)
    assert 0.99 * DAYS * 86_400 < (last - first).total_seconds() <= DAYS * 86_400
    assert Counter(r["tenant_id"] for r in joined) == {t: PAYMENTS // len(tenants) for t in tenants}


def test_each_operation_has_the_claims_two_transitions_then_its_outcome(
    seeded: tuple[str, dict[str, Any]],
) -> None:
    url, _ = seeded
    history: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for row in _rows(
        url,
        "SELECT t.*, o.state, o.created_at AS op_created, o.completed_at"
        " FROM operation_transitions t JOIN operations o ON o.id = t.operation_id"
        " AND o.tenant_id = t.tenant_id ORDER BY t.id",
    ):
        history.setdefault(row["operation_id"], []).append(row)
    assert len(history) == PAYMENTS
    for edges in history.values():
        state = edges[0]["state"]
        assert [(e["from_state"], e["to_state"], e["trigger"]) for e in edges] == [
            (None, "RECEIVED", "claim"),
            ("RECEIVED", "PROVIDER_REQUEST_SENT", "send"),
            ("PROVIDER_REQUEST_SENT", state, "complete" if state == "COMPLETED" else "fail"),
        ]
        assert {e["fence"] for e in edges} == {1}
        assert len({e["actor"] for e in edges}) == 1
        assert [e["created_at"] for e in edges] == [
            edges[0]["op_created"],
            edges[0]["op_created"],
            edges[0]["completed_at"],
        ]


def test_keys_age_with_their_completion_and_fingerprint_their_request(
    seeded: tuple[str, dict[str, Any]],
) -> None:
    url, figures = seeded
    plan = Plan(payments=PAYMENTS, days=DAYS, tenants=(), now=datetime.fromisoformat(
        figures["seeded_at"]))  # fmt: skip
    states: Counter[str] = Counter()
    for row in _rows(
        url,
        "SELECT o.*, p.merchant_reference FROM operations o"
        " JOIN payments p ON p.operation_id = o.id",
    ):
        index = _index(row["merchant_reference"])
        state = plan.key_state(row["completed_at"])
        states[state] += 1
        assert row["fingerprint"] == fingerprint(OPERATION, command_of(index).canonical())
        assert (row["fence"], row["attempts"], row["lease_owner"]) == (1, 0, None)
        assert row["idempotency_key"] == (None if state == "released" else key_of(index))
        stored = row["response_body"] is not None
        assert stored == (row["response_headers"] is not None) == (state == "replayable")
        assert (row["response_expired_at"] is None) == (state == "replayable")
        assert (row["key_released_at"] is None) == (state != "released")
    # Three days against a key TTL of one: about a third still replays, the rest are
    # tombstones; the tombstone TTL (30 days) has released none.
    assert states == figures["key_states"]
    assert set(states) == {"replayable", "tombstone"}
    assert abs(states["replayable"] - PAYMENTS / DAYS) <= 2


def _as_row(row: dict[str, Any]) -> PaymentRow:
    """The payment as the claim made it, for the service's own rendering of its answers."""
    return payments.as_claimed(
        payment_id=row["id"],
        tenant_id=row["tenant_id"],
        operation_id=row["operation_id"],
        provider_key=row["provider_key"],
        route=tuple(row["route"]),
        command=command_of(_index(row["merchant_reference"])),
        at=row["created_at"],
    )


def test_stored_answers_are_the_services_own(seeded: tuple[str, dict[str, Any]]) -> None:
    url, _ = seeded
    rows = _rows(
        url,
        "SELECT p.*, o.response_status, o.response_headers, o.response_body, e.data"
        " FROM payments p JOIN operations o ON o.id = p.operation_id"
        " JOIN events e ON e.operation_id = o.id WHERE o.response_body IS NOT NULL",
    )
    assert {r["status"] for r in rows} == {"SUCCEEDED", "DECLINED", "FAILED"}
    for row in rows:
        claimed = _as_row(row)
        if row["status"] == "FAILED":
            stored = replies.rejected(claimed, REJECTED_DETAIL, operation_id=row["operation_id"])
        else:
            declined = row["status"] == "DECLINED"
            charge = Charge(
                row["provider_charge_id"],
                "declined" if declined else "succeeded",
                DECLINE_CODE if declined else None,
            )
            # What the outcome renders (`PaymentKind.found`): the payment as it leaves it.
            body = payment_json(
                claimed,
                status=row["status"],
                provider_charge_id=charge.charge_id,
                decline_code=charge.decline_code,
                updated_at=row["updated_at"],
                amount_captured_minor=0 if declined else row["amount_minor"],
            )
            assert body == row["data"]
            stored = replies.charged(claimed, charge, operation_id=row["operation_id"], body=body)
        assert row["response_body"] == stored.body.decode(), row["merchant_reference"]
        assert row["response_headers"] == stored.headers
        assert row["response_status"] == stored.status


def test_the_api_reads_every_payment_and_replays_the_replayable_keys(
    seeded: tuple[str, dict[str, Any]], seeded_api: tuple[Process, dict[uuid.UUID, str]]
) -> None:
    url, _ = seeded
    api, keys = seeded_api
    rows = _rows(
        url,
        "SELECT p.id, p.tenant_id, p.merchant_reference, o.idempotency_key, o.response_body,"
        " o.response_status, e.data FROM payments p JOIN operations o ON o.id = p.operation_id"
        " JOIN events e ON e.operation_id = o.id ORDER BY p.created_at",
    )
    replayed = expired = 0
    with httpx.Client(base_url=str(api.url), timeout=30) as client:
        for row in rows[::5]:
            auth = {"authorization": f"Bearer {keys[row['tenant_id']]}"}
            read = client.get(f"/payments/{row['id']}", headers=auth)
            assert read.status_code == 200, read.text
            assert read.json() == row["data"]
            index = _index(row["merchant_reference"])
            answer = client.post(
                "/payments",
                content=request_body(index),
                headers={**auth, "content-type": "application/json",
                         "idempotency-key": key_of(index)},
            )  # fmt: skip
            if row["response_body"] is not None:
                assert answer.status_code == row["response_status"], answer.text
                assert answer.headers["idempotent-replayed"] == "true"
                assert answer.content == row["response_body"].encode()
                replayed += 1
            else:
                assert answer.status_code == 422, answer.text
                assert json.loads(answer.content)["code"] == "IDEMPOTENCY_KEY_EXPIRED"
                expired += 1
    assert replayed > 100
    assert expired > 200
    with psycopg.connect(url) as conn:
        count = conn.execute("SELECT count(*) FROM payments").fetchone()
    assert count == (PAYMENTS,), "a replay or a tombstone's key made a payment"


def test_the_seed_prints_its_phases_rates_and_disk(seeded: tuple[str, dict[str, Any]]) -> None:
    _, figures = seeded
    assert set(figures["phases_s"]) == {
        "insert",
        "index_and_key_builds",
        "vacuum_analyze",
        "checkpoint",
        "total",
    }
    assert figures["rows"] == 7 * PAYMENTS
    assert figures["disk"]["database_mib"] > figures["database_mib_before"]
    assert set(figures["disk"]["tables"]) == {
        "operations",
        "payments",
        "operation_transitions",
        "events",
        "idempotency_keys",
    }


def test_the_partitioned_layout_gets_its_columns_key_rows_and_days(
    scratch_database: str,
) -> None:
    """The head's layout as it is: the operations and payments partitioned by their day, the
    history tables by their operation's, with `operation_created_at`, and the
    `idempotency_keys` table (no trigger: the seeding writes each key's row). 40 days, so
    that some keys are past the tombstone TTL and released (no key row)."""
    upgrade_head(scratch_database)
    figures = seed(scratch_database, payments=400, days=40, chunk=150)
    assert figures["layout"] == {
        "history_created_at": ["events", "operation_transitions"],
        "idempotency_keys": True,
        "partitioned": ["events", "operation_transitions", "operations", "payments"],
    }
    assert set(figures["key_states"]) == {"replayable", "tombstone", "released"}
    assert figures["rows"] == 7 * 400
    counts = _rows(
        scratch_database,
        "SELECT (SELECT count(*) FROM operation_transitions t JOIN operations o"
        "         ON o.id = t.operation_id AND o.created_at = t.operation_created_at) AS edges,"
        " (SELECT count(*) FROM events e JOIN operations o"
        "         ON o.id = e.operation_id AND o.created_at = e.operation_created_at) AS events,"
        " (SELECT count(*) FROM idempotency_keys k JOIN operations o ON o.id = k.operation_id"
        "         AND o.tenant_id = k.tenant_id AND o.operation_name = k.operation_name"
        "         AND o.idempotency_key = k.idempotency_key"
        "         AND o.created_at = k.operation_created_at) AS keys,"
        " (SELECT count(*) FROM idempotency_keys) AS key_rows,"
        " (SELECT count(*) FROM operations WHERE idempotency_key IS NOT NULL) AS held,"
        " (SELECT count(*) FROM events_legacy) + (SELECT count(*)"
        "         FROM operation_transitions_legacy) + (SELECT count(*) FROM operations_legacy)"
        "         + (SELECT count(*) FROM payments_legacy) AS legacy,"
        " (SELECT count(*) FROM payments p JOIN operations o"
        "         ON o.id = p.operation_id AND o.created_at = p.created_at) AS payments,"
        " (SELECT count(*) FROM pg_index WHERE NOT indisvalid) AS invalid",
    )[0]
    assert counts["edges"] == 3 * 400
    assert counts["events"] == 400
    assert counts["payments"] == 400
    assert counts["keys"] == counts["key_rows"] == counts["held"]
    assert counts["held"] == 400 - figures["key_states"]["released"]
    # Every seeded row in its day's partition, each with the parent's indexes.
    assert counts["legacy"] == 0
    assert counts["invalid"] == 0
    for table, column in (("events", "operation_created_at"), ("payments", "created_at")):
        days = _rows(
            scratch_database,
            "SELECT tableoid::regclass::text AS partition,"
            f" bool_and(to_char({column} AT TIME ZONE 'UTC', '_pYYYYMMDD')"
            "          = right(tableoid::regclass::text, 10)) AS own_day"
            f" FROM {table} GROUP BY 1 ORDER BY 1",
        )
        # A partition for each day the seeded rows fall on (40 days back from the seeding's
        # start: 41 calendar days, or 40 when the newest day has no row yet).
        (seeded_days,) = _rows(
            scratch_database,
            f"SELECT count(DISTINCT ({column} AT TIME ZONE 'UTC')::date) AS n FROM {table}",
        )
        assert len(days) == seeded_days["n"], table
        assert len(days) in (40, 41), table
        assert all(day["own_day"] for day in days), table
    # Each partitioned table's every index on each of its partitions.
    indexes = _rows(
        scratch_database,
        "SELECT p.relname AS parent, x.indrelid::regclass::text AS tbl,"
        " (SELECT count(c.oid) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        "  WHERE i.inhparent = p.oid) AS partitions,"
        " (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = x.indrelid) AS table_partitions"
        " FROM pg_class p JOIN pg_index x ON x.indexrelid = p.oid WHERE p.relkind = 'I'",
    )
    assert {row["tbl"] for row in indexes} == {
        "events",
        "operation_transitions",
        "operations",
        "payments",
    }
    assert len(indexes) == 3 + 3 + 9 + 12
    for row in indexes:
        assert row["partitions"] == row["table_partitions"] > 41, row


# Every constraint, valid index and trigger of the schema's tables, by what it is (its
# columns, not its printed definition: an index put back from `pg_get_indexdef` prints its
# predicate's constants with their casts spelled out, the same predicate once planned). A
# partition's indexes and constraints are made by its parent's, and named by PostgreSQL
# when remade: only what they are counts there.
_SCHEMA = """
    SELECT t.relname AS rel, 'constraint ' || CASE WHEN t.relispartition THEN ''
           ELSE c.conname END || ' ' || c.contype::text || ' ' || c.conkey::text AS item
    FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
    WHERE t.relnamespace = 'public'::regnamespace
    UNION ALL
    SELECT t.relname, 'index ' || CASE WHEN t.relispartition THEN '' ELSE i.relname END
           || ' ' || (SELECT amname FROM pg_am WHERE oid = i.relam) || ' ' || x.indkey::text || ' '
           || x.indisunique::text || ' ' || (x.indpred IS NOT NULL)::text
    FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
    WHERE t.relnamespace = 'public'::regnamespace AND x.indisvalid
    UNION ALL
    SELECT t.relname, 'trigger ' || g.tgname || ' ' || g.tgenabled::text
    FROM pg_trigger g JOIN pg_class t ON t.oid = g.tgrelid
    WHERE NOT g.tgisinternal AND t.relnamespace = 'public'::regnamespace
"""
# Each partition's indexes against its parent's: a partition the seeding made has them all.
_PARTITION_INDEXES = """
    SELECT child.relname AS partition,
           (SELECT count(*) FROM pg_index WHERE indrelid = child.oid AND indisvalid) AS own,
           (SELECT count(*) FROM pg_index WHERE indrelid = parent.oid) AS parents
    FROM pg_inherits h JOIN pg_class child ON child.oid = h.inhrelid
    JOIN pg_class parent ON parent.oid = h.inhparent
"""


@pytest.mark.parametrize("revision", ["head", "0030"])
def test_the_load_puts_back_every_constraint_index_and_trigger(
    scratch_database: str, revision: str
) -> None:
    """The load drops the primary keys, unique constraints, indexes and foreign keys (and
    disables the key table's claim trigger on a layout that has one, as 0030 does), then puts
    everything back: each table's constraints, indexes and triggers after the seeding are
    those before it, a day partition the seeding made has its parent's indexes, and the rows
    are the right ones (the keys' rows through the claim trigger's layout too)."""
    if revision == "head":
        upgrade_head(scratch_database)
    else:
        command.upgrade(alembic_config(scratch_database), revision)
    before = Counter((row["rel"], row["item"]) for row in _rows(scratch_database, _SCHEMA))
    figures = seed(scratch_database, payments=900, days=5, chunk=100, jobs=3)
    existed = {rel for rel, _ in before}
    after = Counter(
        (row["rel"], row["item"])
        for row in _rows(scratch_database, _SCHEMA)
        if row["rel"] in existed
    )
    assert before - after == Counter(), "not put back"
    assert after - before == Counter(), "made by the seeding"
    for row in _rows(scratch_database, _PARTITION_INDEXES):
        assert row["own"] == row["parents"], row
    assert figures["jobs"] == 3
    (counts,) = _rows(
        scratch_database,
        "SELECT (SELECT count(*) FROM operations) AS operations,"
        " (SELECT count(DISTINCT id) FROM operations) AS ids,"
        " (SELECT count(*) FROM idempotency_keys k JOIN operations o ON o.id = k.operation_id"
        "         AND o.idempotency_key = k.idempotency_key) AS keys",
    )
    assert counts["operations"] == counts["ids"] == 900
    assert counts["keys"] == 900
