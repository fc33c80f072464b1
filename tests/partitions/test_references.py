"""What keeps the references to the partitioned tables true without a foreign key.

`payment_failovers.transition_id` names an audit row and `webhook_deliveries.event_id` an
event; both tables are partitioned by the operation's day, and a foreign key to them would
have to name that day too, so there is none. Each referencing row is written by the same
statement as the row it names, from that row's `RETURNING` (the failover's `audit` CTE,
the outbox's `event` CTE): it exists exactly when what it names does. Nothing deletes from
either table; retention detaches a whole day (docs/scaling.md, "Time partitions").
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.failover.test_failover_records import _claimed, _fail_over
from tests.support.factories.payments import new_key, post_payment
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


def test_a_delivery_names_its_event(client: httpx.Client, tenant: TenantHandle, db: Db) -> None:
    create_endpoint(client, "http://127.0.0.1:9/hook")
    for _ in range(3):
        assert post_payment(client, key=new_key()).status_code == 201
    found = db.execute(_DANGLING, {"t": tenant.id}).fetchone()
    assert found is not None
    assert (found["deliveries"], found["deliveries_all"]) == (0, 3)
