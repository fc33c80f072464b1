"""The console's CSV exports past one page and at their cut, over HTTP against the real API.

An export reads `export.PAGE` rows at a time by keyset and stops at `export.MAX_ROWS` (or
at the form's `rows`, if fewer), its last line then saying it was cut. The rows are written
in SQL (as a deployment's would be, years old so no chart or expiry sees them), with
creation times shared by three rows each, so page boundaries fall between rows of one
instant and only the id orders them. Each test makes its own other tenant with rows at the
very same instants, which must never appear.
"""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.console.export import MAX_ROWS, PAGE
from tests.console.test_console_http import _login
from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle
from tests.support.factories.tenants import make_tenant

Db = psycopg.Connection[DictRow]
CUT = [f"# cut at {MAX_ROWS} rows: narrow the filter"]

# Rows `first`..`last` of a tenant: an operation and its payment (and with `refunds`, the
# payment's refund and its operation), all at one instant, three rows to an instant. Every
# statement of the WITH runs, referenced or not.
_SEED = """
WITH made AS (
    SELECT g, gen_random_uuid() AS op, gen_random_uuid() AS payment,
           gen_random_uuid() AS refund_op, gen_random_uuid() AS refund,
           timestamptz '2001-01-01 00:00:00+00' + make_interval(secs => g / 3) AS at
    FROM generate_series(%(first)s::int, %(last)s::int) AS g
), ops AS (
    INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint, state,
                            response_status, created_at, updated_at, completed_at)
    SELECT op, %(tenant)s, 'create_payment', 'seed-' || g, 'f', 'COMPLETED', 201, at, at,
           now()
    FROM made
    UNION ALL
    SELECT refund_op, %(tenant)s, 'create_refund', 'seed-refund-' || g, 'f', 'COMPLETED',
           201, at, at, now()
    FROM made WHERE %(refunds)s
    RETURNING 1
), pays AS (
    INSERT INTO payments (id, tenant_id, operation_id, provider_key, route, status,
                          amount_minor, currency, account_id, created_at, updated_at)
    SELECT payment, %(tenant)s, op, 'payment-' || payment, '{primary}', 'SUCCEEDED', 100,
           'EUR', 'acc_seed', at, at
    FROM made
    RETURNING 1
)
INSERT INTO refunds (id, tenant_id, payment_id, operation_id, provider_key, charge_id,
                     provider, status, amount_minor, currency, created_at, updated_at)
SELECT refund, %(tenant)s, payment, refund_op, 'refund-' || refund, 'ch_seed', 'primary',
       'SUCCEEDED', 50, 'EUR', at, at
FROM made WHERE %(refunds)s
"""


def _seed(db: Db, tenant: uuid.UUID, first: int, last: int, *, refunds: bool) -> None:
    db.execute(_SEED, {"tenant": tenant, "first": first, "last": last, "refunds": refunds})


def _purge(db: Db, tenant: uuid.UUID) -> None:
    for table in ("refunds", "payments", "operations"):
        db.execute(f"DELETE FROM {table} WHERE tenant_id = %s", (tenant,))


@pytest.fixture
def tenants(db: Db) -> Iterator[tuple[uuid.UUID, uuid.UUID]]:
    """A tenant for the test's rows and another whose rows must never appear; both purged
    after (the rows are many, and other tests' unfiltered reads should not wade through
    them)."""
    mine, theirs = make_tenant(db, "export paging").id, make_tenant(db, "another tenant").id
    try:
        yield mine, theirs
    finally:
        _purge(db, mine)
        _purge(db, theirs)


def _in_order(db: Db, table: str, tenant: uuid.UUID, *, newest_first: bool) -> list[str]:
    """The tenant's ids in the list's order, read straight from the table."""
    way = "DESC" if newest_first else "ASC"
    rows = db.execute(
        f"SELECT id::text FROM {table} WHERE tenant_id = %s ORDER BY created_at {way}, id {way}",
        (tenant,),
    ).fetchall()
    return [row["id"] for row in rows]


def _export(
    http: httpx.Client, kind: str, tenant: uuid.UUID, *, rows: int | None = None
) -> list[list[str]]:
    """The export's rows after its header (the cut's line included)."""
    params = {"tenant": str(tenant)}
    if rows is not None:
        params["rows"] = str(rows)
    answer = http.get(f"/console/{kind}.csv", params=params)
    assert answer.status_code == 200, answer.text[:300]
    lines = list(csv.reader(io.StringIO(answer.text, newline="")))
    assert lines[0][0] == f"{kind.removesuffix('s')}_id", lines[0]
    return lines[1:]


def test_an_export_of_several_pages_has_every_row_once_in_the_lists_order(
    api: Process, admin: AdminHandle, db: Db, tenants: tuple[uuid.UUID, uuid.UUID]
) -> None:
    mine, theirs = tenants
    rows = 2 * PAGE + PAGE // 2
    _seed(db, mine, 1, rows, refunds=True)
    _seed(db, theirs, 1, rows // 10, refunds=True)
    payments = _in_order(db, "payments", mine, newest_first=True)
    refunds = _in_order(db, "refunds", mine, newest_first=True)
    operations = _in_order(db, "operations", mine, newest_first=False)
    assert len(payments) == len(refunds) == rows
    assert len(operations) == 2 * rows
    theirs_ids = {
        *_in_order(db, "payments", theirs, newest_first=True),
        *_in_order(db, "refunds", theirs, newest_first=True),
        *_in_order(db, "operations", theirs, newest_first=True),
    }

    with httpx.Client(base_url=str(api.admin_url), timeout=60) as http:
        _login(http, admin.token)
        exported = {
            kind: _export(http, kind, mine) for kind in ("payments", "refunds", "operations")
        }
    assert [r[0] for r in exported["payments"]] == payments
    assert [r[0] for r in exported["refunds"]] == refunds
    assert [r[0] for r in exported["operations"]] == operations
    for kind, table in exported.items():
        assert {r[1] for r in table} == {str(mine)}, kind
        assert theirs_ids.isdisjoint(r[0] for r in table), kind


def test_an_export_stops_at_the_rows_asked_for_and_says_so_on_its_last_line(
    api: Process, admin: AdminHandle, db: Db, tenants: tuple[uuid.UUID, uuid.UUID]
) -> None:
    mine, theirs = tenants
    total = 2 * PAGE + PAGE // 2
    _seed(db, mine, 1, total, refunds=False)
    _seed(db, theirs, 1, total, refunds=False)
    payments = _in_order(db, "payments", mine, newest_first=True)
    operations = _in_order(db, "operations", mine, newest_first=False)
    most = 2 * PAGE + 1  # one row into the third page
    with httpx.Client(base_url=str(api.admin_url), timeout=60) as http:
        _login(http, admin.token)
        cut = {kind: _export(http, kind, mine, rows=most) for kind in ("payments", "operations")}
        exact = _export(http, "payments", mine, rows=total)
        refused = http.get("/console/payments.csv", params={"tenant": str(mine), "rows": "0"})
        assert refused.status_code == 303
        listed = http.get(refused.headers["location"])
    assert (
        cut["payments"][-1] == cut["operations"][-1] == [f"# cut at {most} rows: narrow the filter"]
    )
    assert [r[0] for r in cut["payments"][:-1]] == payments[:most]
    assert [r[0] for r in cut["operations"][:-1]] == operations[:most]
    # Asked for exactly what there is: every row, and no cut.
    assert [r[0] for r in exact] == payments
    assert listed.status_code == 422
    assert f"rows: a whole number from 1 to {MAX_ROWS}" in listed.text


@pytest.mark.long
def test_an_export_stops_at_its_limit_and_says_so_on_its_last_line(
    api: Process, admin: AdminHandle, db: Db, tenants: tuple[uuid.UUID, uuid.UUID]
) -> None:
    """The real limit, `MAX_ROWS` (100,000): about two minutes, so among the long tests."""
    mine, theirs = tenants
    _seed(db, mine, 1, MAX_ROWS + 1, refunds=False)
    _seed(db, theirs, MAX_ROWS - 10, MAX_ROWS + 10, refunds=False)
    with httpx.Client(base_url=str(api.admin_url), timeout=120) as http:
        _login(http, admin.token)
        payments = _export(http, "payments", mine)
        operations = _export(http, "operations", mine)
    newest_first = _in_order(db, "payments", mine, newest_first=True)
    oldest_first = _in_order(db, "operations", mine, newest_first=False)
    assert len(newest_first) == len(oldest_first) == MAX_ROWS + 1
    # The oldest payment and the newest operation are the ones left out.
    assert payments[-1] == operations[-1] == CUT
    assert [r[0] for r in payments[:-1]] == newest_first[:MAX_ROWS]
    assert [r[0] for r in operations[:-1]] == oldest_first[:MAX_ROWS]
