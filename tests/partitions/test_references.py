"""What keeps the references to the partitioned tables true without a foreign key.

`payment_failovers.transition_id` names an audit row and `webhook_deliveries.event_id` an
event; the audit trail, the events, payments, refunds, captures and voids name their
operation, and refunds, captures, voids and failover records their payment. All four
named tables are partitioned by the operation's day, and a foreign key to them would have
to name that day too, so there is none. Each referencing row is written in the statement
or the transaction that reads or locks what it names: by the same statement, from that
row's `RETURNING` (the verbs' `changed`, the failover's `audit` CTE, the outbox's `event`
CTE, the claim's payment), or by a claim that locks the payment first (a refund, a
capture, a void). Nothing deletes from the four tables but retention, which detaches a
whole day (docs/scaling.md, "Time partitions").
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.failover.test_failover_records import _claimed, _fail_over
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.payments import new_key, post_payment
from tests.support.factories.refunds import paid, post_refund
from tests.support.factories.tenants import TenantHandle
from tests.support.factories.webhooks import create_endpoint
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]

_DANGLING = """
    SELECT (SELECT count(*) FROM payment_failovers f WHERE f.tenant_id = %(t)s
              AND NOT EXISTS (SELECT FROM operation_transitions x
                              WHERE x.id = f.transition_id AND x.tenant_id = f.tenant_id
                                AND x.trigger = 'failover')) AS failovers,
           (SELECT count(*) FROM webhook_deliveries d WHERE d.tenant_id = %(t)s
              AND NOT EXISTS (SELECT FROM events x
                              WHERE x.id = d.event_id AND x.tenant_id = d.tenant_id))
             AS deliveries,
           (SELECT count(*) FROM payment_failovers WHERE tenant_id = %(t)s) AS failovers_all,
           (SELECT count(*) FROM webhook_deliveries WHERE tenant_id = %(t)s) AS deliveries_all
"""


def test_a_failover_record_names_its_audit_row(
    async_db: AsyncDb, tenant: TenantHandle, db: Db
) -> None:
    ref = async_db.run(_claimed(async_db, tenant))
    assert async_db.run(_fail_over(async_db, ref, "processor_declined")) is not None
    found = db.execute(_DANGLING, {"t": tenant.id}).fetchone()
    assert found is not None
    assert (found["failovers"], found["failovers_all"]) == (0, 1)


# Every row of the tenant that names an operation or a payment, and how many of them name
# one that is not there: (rows, missing) per reference.
_NAMED = """
    SELECT r.ref, count(*) AS n,
           count(*) FILTER (WHERE NOT EXISTS (
               SELECT FROM operations o WHERE o.id = r.operation_id)) AS no_operation,
           count(*) FILTER (WHERE r.payment_id IS NOT NULL AND NOT EXISTS (
               SELECT FROM payments p WHERE p.id = r.payment_id)) AS no_payment
    FROM (
        SELECT 'payment' AS ref, operation_id, NULL::uuid AS payment_id FROM payments
        WHERE tenant_id = %(t)s
        UNION ALL SELECT 'transition', operation_id, NULL FROM operation_transitions
        WHERE tenant_id = %(t)s
        UNION ALL SELECT 'event', operation_id, NULL FROM events WHERE tenant_id = %(t)s
        UNION ALL SELECT 'refund', operation_id, payment_id FROM refunds
        WHERE tenant_id = %(t)s
        UNION ALL SELECT 'modification', operation_id, payment_id FROM payment_modifications
        WHERE tenant_id = %(t)s
    ) AS r
    GROUP BY r.ref ORDER BY r.ref
"""


def test_every_row_names_an_operation_and_a_payment_that_are_there(
    client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    payment = paid(client)
    assert post_refund(client, payment["payment_id"], key=new_key()).status_code == 201
    assert post_capture(client, authorized(client)["payment_id"]).status_code == 201
    assert post_void(client, authorized(client)["payment_id"]).status_code == 201
    found = {row["ref"]: row for row in db.execute(_NAMED, {"t": tenant.id}).fetchall()}
    assert set(found) == {"event", "modification", "payment", "refund", "transition"}
    for ref, row in found.items():
        assert row["n"] > 0, ref
        assert (row["no_operation"], row["no_payment"]) == (0, 0), row
    # The payment's `created_at` is its operation's: one day's partitions hold both.
    apart = db.execute(
        "SELECT count(*) AS n FROM payments p JOIN operations o ON o.id = p.operation_id"
        " WHERE p.tenant_id = %s AND o.created_at <> p.created_at",
        (tenant.id,),
    ).fetchone()
    assert apart == {"n": 0}


def test_a_delivery_names_its_event(client: httpx.Client, tenant: TenantHandle, db: Db) -> None:
    create_endpoint(client, "http://127.0.0.1:9/hook")
    for _ in range(3):
        assert post_payment(client, key=new_key()).status_code == 201
    found = db.execute(_DANGLING, {"t": tenant.id}).fetchone()
    assert found is not None
    assert (found["deliveries"], found["deliveries_all"]) == (0, 3)
