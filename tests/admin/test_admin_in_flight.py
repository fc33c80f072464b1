"""The in-flight guard measures from the last send, against the real API and provider.

An operator may not resolve "not charged" while a provider request of the operation may
still be on its way (`PROVIDER_CALL_MAY_BE_IN_FLIGHT`): the window is a lease from a send.
Here the first send is an hour old (its timestamps written in SQL) and a resend happened a
moment ago: the resolution is refused, with a Retry-After within a lease, and nothing is
changed. A guard that measured from the first send would let it through.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.admin.test_admin_api import _recorded
from tests.conftest import TEST_LEASE_S
from tests.support.control.faults import FaultInjector
from tests.support.factories.operators import flag
from tests.support.readers.operations import operation, payment_for, transitions

Db = psycopg.Connection[DictRow]


def _sends(db: Db, operation_id: str) -> list[float]:
    """Seconds since each send (a transition to PROVIDER_REQUEST_SENT), oldest first."""
    rows = db.execute(
        "SELECT extract(epoch FROM now() - created_at)::float AS ago FROM operation_transitions"
        " WHERE operation_id = %s AND to_state = 'PROVIDER_REQUEST_SENT' ORDER BY id",
        (operation_id,),
    ).fetchall()
    return [row["ago"] for row in rows]


def test_a_recent_resend_keeps_the_operation_unresolvable_however_old_the_first_send(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: Db,
) -> None:
    lease_s = float(TEST_LEASE_S)
    flagged = flag(client, faults, db, charged=False)
    faults.clear()
    history = transitions(db, flagged.operation_id)
    sends = [t for t in history if t["to_state"] == "PROVIDER_REQUEST_SENT"]
    assert len(sends) >= 2, [(t["trigger"], t["to_state"]) for t in history]
    # Everything an hour earlier but the last send (the resend of the client's last retry,
    # a moment ago) and what followed it.
    db.execute(
        "UPDATE operation_transitions SET created_at = created_at - interval '1 hour'"
        " WHERE operation_id = %s AND id < %s",
        (flagged.operation_id, sends[-1]["id"]),
    )
    # The operation's history is kept with its day (its audit rows name it), and its
    # payment has its `created_at`: all of it moves.
    db.execute(
        "WITH aged AS (UPDATE operations SET created_at = created_at - interval '1 hour'"
        " WHERE id = %s RETURNING id, created_at),"
        " paid AS (UPDATE payments AS p SET created_at = aged.created_at FROM aged"
        " WHERE p.operation_id = aged.id),"
        " keyed AS (UPDATE idempotency_keys AS k SET operation_created_at = aged.created_at"
        " FROM aged WHERE k.operation_id = aged.id)"
        " UPDATE operation_transitions AS t SET operation_created_at = aged.created_at"
        " FROM aged WHERE t.operation_id = aged.id",
        (flagged.operation_id,),
    )
    ago = _sends(db, flagged.operation_id)
    assert ago[0] >= 3600, ago
    assert ago[-1] < lease_s - 2, ago  # the premise: the request below comes inside a lease
    before = _recorded(db, flagged.operation_id)

    refused = admin_client.post(
        f"/admin/operations/{flagged.operation_id}/resolve",
        json={"outcome": "not_charged", "reason": "provider has no record"},
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "PROVIDER_CALL_MAY_BE_IN_FLIGHT"
    assert 1 <= int(refused.headers["retry-after"]) <= lease_s + 1
    assert _recorded(db, flagged.operation_id) == before
    row = operation(db, flagged.operation_id)
    assert (row["state"], row["needs_attention"], row["lease_owner"]) == (
        "UNKNOWN_REQUIRES_RECOVERY",
        True,
        None,
    )
    assert payment_for(db, flagged.operation_id)["status"] == "PENDING"
